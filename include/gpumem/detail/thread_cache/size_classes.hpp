// gpumem/detail/thread_cache/size_classes.hpp — the size classes of the per-thread cache (not API).
//
// Sizes are counted in units of 256 bytes (the allocation granule). Classes 0..15 are exact
// (256 B .. 4 KiB); above 4 KiB each doubling is cut into 8 classes (a class spans 1/8 of its
// octave, so a block of the next class always fits any request of this one).
// Invariant: units <= class_units(class_of(units)), and class_units(c - 1) < units for c > 0.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace gpumem::detail::thread_cache {

inline constexpr std::size_t granule_bytes     = 256;
inline constexpr unsigned exact_classes        = 16;  ///< 256 B .. 4 KiB, one per granule
inline constexpr unsigned classes_per_doubling = 8;

/// Granules needed for `bytes` (bytes must not overflow when rounded up).
[[nodiscard]] constexpr std::uint64_t units_of(std::size_t bytes) noexcept
{
  return (bytes + granule_bytes - 1) / granule_bytes;
}

/// The class of a size of `units` granules (units >= 1).
[[nodiscard]] constexpr unsigned class_of(std::uint64_t units) noexcept
{
  if (units <= exact_classes) { return static_cast<unsigned>(units - 1); }
  auto const v      = units - 1;
  auto const octave = static_cast<unsigned>(63 - std::countl_zero(v));  // >= 4
  auto const step   = static_cast<unsigned>(v >> (octave - 3)) & (classes_per_doubling - 1);
  return exact_classes + (octave - 4) * classes_per_doubling + step;
}

/// The largest size, in granules, of class `c`.
[[nodiscard]] constexpr std::uint64_t class_units(unsigned c) noexcept
{
  if (c < exact_classes) { return c + 1; }
  auto const octave = 4 + (c - exact_classes) / classes_per_doubling;
  auto const step   = (c - exact_classes) % classes_per_doubling;
  return std::uint64_t{classes_per_doubling + step + 1} << (octave - 3);
}

static_assert(class_of(16) == 15 && class_of(17) == 16 && class_units(16) == 18);
static_assert(class_of(32) == 23 && class_units(23) == 32 && class_of(33) == 24);

}  // namespace gpumem::detail::thread_cache
