// The wrong-size report of live_allocations (stderr, the first few per adaptor, like the
// suballocators' bad-deallocation reports).
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/live_allocations.hpp>

#include <cstdio>

namespace gpumem::detail {
namespace {

constexpr std::uint64_t reports_per_adaptor = 8;

}  // namespace

void report_wrong_size_free(char const* adaptor, void const* ptr, std::size_t bytes,
                            std::size_t recorded, std::uint64_t count) noexcept
{
  if (count > reports_per_adaptor) { return; }
  try {
    auto const msg =
        format("gpumem: ", adaptor, ": deallocate(", ptr_str(ptr), ", ", bytes,
               " bytes) of a block allocated with ", recorded, " bytes; freed as ", recorded,
               " bytes", count == reports_per_adaptor ? " (further reports suppressed)" : "", "\n");
    std::fputs(msg.c_str(), stderr);
  } catch (...) {  // NOLINT(bugprone-empty-catch): a diagnostic must not throw from deallocate
  }
}

}  // namespace gpumem::detail
