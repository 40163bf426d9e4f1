// gpumem/detail/caching/bin_layout.hpp — the geometric bins of the caching allocator.
// Not API.
//
// Bin b holds blocks of exactly bin_growth^b bytes, for min_bin <= b <= last_bin(). A request is
// rounded up to the nearest power of bin_growth; below bin_growth^min_bin it is rounded up to that;
// above bin_growth^max_bin it gets no bin (invalid_bin) and keeps its exact size (pass-through).
// max_bin == invalid_bin means "no maximum": bins go as far as size_t can count.
// Immutable after construction; thread-safe.
#pragma once

#include <cstddef>

namespace gpumem::detail::caching {

inline constexpr unsigned invalid_bin{static_cast<unsigned>(-1)};
inline constexpr std::size_t invalid_size{static_cast<std::size_t>(-1)};

/// A bin and its block size; {invalid_bin, exact bytes} for pass-through requests.
struct bin_choice {
  unsigned bin{invalid_bin};
  std::size_t bytes{};
};

/// The smallest power p of `base` with base^p >= value, and base^p; {invalid_bin, value} when
/// base^p does not fit in size_t.
[[nodiscard]] constexpr bin_choice nearest_power_of(unsigned base, std::size_t value) noexcept
{
  bin_choice r{0, 1};
  while (r.bytes < value) {
    if (r.bytes > invalid_size / base) { return {invalid_bin, value}; }
    r.bytes *= base;
    ++r.bin;
  }
  return r;
}

class bin_layout {
 public:
  /// Throws logic_error when bin_growth < 2, min_bin > max_bin or a bound overflows size_t.
  bin_layout(unsigned bin_growth, unsigned min_bin, unsigned max_bin);

  [[nodiscard]] unsigned bin_growth() const noexcept { return bin_growth_; }
  [[nodiscard]] unsigned min_bin() const noexcept { return min_bin_; }
  /// As configured (invalid_bin: no maximum).
  [[nodiscard]] unsigned max_bin() const noexcept { return max_bin_; }
  /// The largest bin that exists (max_bin, or the largest power that fits in size_t).
  [[nodiscard]] unsigned last_bin() const noexcept { return last_bin_; }
  [[nodiscard]] std::size_t min_bin_bytes() const noexcept { return min_bin_bytes_; }
  /// bin_growth^max_bin, or invalid_size when there is no maximum.
  [[nodiscard]] std::size_t max_bin_bytes() const noexcept { return max_bin_bytes_; }
  [[nodiscard]] std::size_t bin_count() const noexcept { return last_bin_ - min_bin_ + 1; }
  [[nodiscard]] std::size_t bin_bytes(unsigned bin) const noexcept;
  /// Where a request of `bytes` goes.
  [[nodiscard]] bin_choice classify(std::size_t bytes) const noexcept;

 private:
  unsigned bin_growth_;
  unsigned min_bin_;
  unsigned max_bin_;
  unsigned last_bin_;
  std::size_t min_bin_bytes_;
  std::size_t max_bin_bytes_;
};

}  // namespace gpumem::detail::caching
