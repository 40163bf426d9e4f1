// Geometric bins of the caching allocator. See bin_layout.hpp.
#include <gpumem/detail/caching/bin_layout.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>

namespace gpumem::detail::caching {
namespace {

/// The largest p with base^p representable in size_t.
unsigned largest_power(unsigned base)
{
  unsigned p = 0;
  for (std::size_t v = 1; v <= invalid_size / base; v *= base) { ++p; }
  return p;
}

std::size_t power(unsigned base, unsigned exp)
{
  std::size_t v = 1;
  for (unsigned i = 0; i < exp; ++i) { v *= base; }
  return v;
}

}  // namespace

bin_layout::bin_layout(unsigned bin_growth, unsigned min_bin, unsigned max_bin)
    : bin_growth_{bin_growth}, min_bin_{min_bin}, max_bin_{max_bin}
{
  GPUMEM_EXPECTS(bin_growth >= 2, logic_error,
                 format("caching allocator: bin_growth must be at least 2, got ", bin_growth));
  auto const limit = largest_power(bin_growth);
  last_bin_        = max_bin == invalid_bin ? limit : max_bin;
  GPUMEM_EXPECTS(min_bin <= last_bin_ && last_bin_ <= limit, logic_error,
                 format("caching allocator: need min_bin <= max_bin and bin_growth^max_bin to fit "
                        "in size_t; got bin_growth ",
                        bin_growth, ", min_bin ", min_bin, ", max_bin ", max_bin));
  min_bin_bytes_ = power(bin_growth, min_bin);
  max_bin_bytes_ = max_bin == invalid_bin ? invalid_size : power(bin_growth, max_bin);
}

std::size_t bin_layout::bin_bytes(unsigned bin) const noexcept
{
  return power(bin_growth_, bin);
}

bin_choice bin_layout::classify(std::size_t bytes) const noexcept
{
  auto const r = nearest_power_of(bin_growth_, bytes);
  if (r.bin == invalid_bin || r.bin > last_bin_) { return {invalid_bin, bytes}; }
  if (r.bin < min_bin_) { return {min_bin_, min_bin_bytes_}; }
  return r;
}

}  // namespace gpumem::detail::caching
