// gpumem/align.hpp — alignment constants and helpers (all constexpr, no state).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpumem {

/// Alignment of every pointer a device resource returns (cudaMalloc's guarantee).
inline constexpr std::size_t CUDA_ALLOCATION_ALIGNMENT{256};
/// Default alignment of host allocations.
inline constexpr std::size_t RMM_DEFAULT_HOST_ALIGNMENT{alignof(std::max_align_t)};
inline constexpr std::size_t DEFAULT_HOST_ALIGNMENT{RMM_DEFAULT_HOST_ALIGNMENT};

[[nodiscard]] constexpr bool is_pow2(std::size_t value) noexcept
{
  return value != 0 && (value & (value - 1)) == 0;
}

/// A supported alignment is a power of two.
[[nodiscard]] constexpr bool is_supported_alignment(std::size_t alignment) noexcept
{
  return is_pow2(alignment);
}

/// Rounds `value` up to a multiple of `alignment` (a power of two). Callers guard overflow.
[[nodiscard]] constexpr std::size_t align_up(std::size_t value, std::size_t alignment) noexcept
{
  return (value + (alignment - 1)) & ~(alignment - 1);
}

[[nodiscard]] constexpr std::size_t align_down(std::size_t value, std::size_t alignment) noexcept
{
  return value & ~(alignment - 1);
}

[[nodiscard]] constexpr bool is_aligned(std::size_t value, std::size_t alignment) noexcept
{
  return (value & (alignment - 1)) == 0;
}

[[nodiscard]] inline bool is_pointer_aligned(void const* ptr,
                                             std::size_t alignment = CUDA_ALLOCATION_ALIGNMENT)
{
  return is_aligned(reinterpret_cast<std::uintptr_t>(ptr), alignment);
}

/// True when align_up(value, alignment) does not wrap around.
[[nodiscard]] constexpr bool can_align_up(std::size_t value, std::size_t alignment) noexcept
{
  return value <= SIZE_MAX - (alignment - 1);
}

}  // namespace gpumem
