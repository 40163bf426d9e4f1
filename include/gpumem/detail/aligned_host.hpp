// gpumem/detail/aligned_host.hpp — over-aligned host allocation from an allocator that only
// guarantees 256-byte alignment (pinned host memory). Host memory only: the original pointer is
// stored just before the returned one. Not API.
#pragma once

#include <gpumem/align.hpp>

#include <cstddef>
#include <cstdint>

namespace gpumem::detail {

/// The alignment a host resource uses for a request of `alignment`: itself when it is a power of
/// two, else RMM_DEFAULT_HOST_ALIGNMENT (the host resources' documented fallback).
[[nodiscard]] constexpr std::size_t host_alignment(std::size_t alignment) noexcept
{
  return is_supported_alignment(alignment) ? alignment : RMM_DEFAULT_HOST_ALIGNMENT;
}

/// Allocates `bytes` aligned to `alignment` (a power of two) with `alloc(n)` (which returns
/// 256-byte aligned memory or throws).
template <class Alloc>
void* aligned_host_allocate(std::size_t bytes, std::size_t alignment, Alloc&& alloc)
{
  if (alignment <= CUDA_ALLOCATION_ALIGNMENT) { return alloc(bytes); }
  auto const padded                     = bytes + alignment + sizeof(void*);
  auto* raw                             = static_cast<char*>(alloc(padded));
  auto const addr                       = reinterpret_cast<std::uintptr_t>(raw) + sizeof(void*);
  auto* aligned                         = reinterpret_cast<char*>(align_up(addr, alignment));
  reinterpret_cast<void**>(aligned)[-1] = raw;
  return aligned;
}

/// Frees memory from aligned_host_allocate with `free(original)`.
template <class Free>
void aligned_host_deallocate(void* ptr, std::size_t alignment, Free&& free) noexcept
{
  if (alignment <= CUDA_ALLOCATION_ALIGNMENT) {
    free(ptr);
    return;
  }
  free(static_cast<void**>(ptr)[-1]);
}

}  // namespace gpumem::detail
