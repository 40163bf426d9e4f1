// Non-template parts of the stream-ordered core: thread serials, registry ids, diagnostics.
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/stream_ordered_memory_resource.hpp>
#include <gpumem/detail/stream_registry.hpp>
#include <gpumem/error.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>

namespace gpumem::detail {
namespace {
std::atomic<std::uint64_t> thread_serials{0};
std::atomic<std::uint64_t> registry_ids{0};
constexpr std::uint64_t reports_per_resource = 8;
}  // namespace

std::uint64_t this_thread_serial() noexcept
{
  static thread_local std::uint64_t const serial = ++thread_serials;
  return serial;
}

std::uint64_t next_registry_id() noexcept
{
  return ++registry_ids;
}

stream_identity stream_identity::of(cudaStream_t stream) noexcept
{
  cuda_stream_view const view{stream};
  if (view.is_per_thread_default()) { return {cudaStreamPerThread, this_thread_serial()}; }
  if (view.is_default()) { return {cudaStreamLegacy, 0}; }
  return {stream, 0};
}

void report_bad_deallocation(char const* resource, void const* ptr, std::size_t bytes,
                             std::string const& why, std::uint64_t count) noexcept
{
  if (count > reports_per_resource) { return; }
  try {
    auto const msg = format(
        "gpumem: ", resource, ": ignored deallocate(", ptr_str(ptr), ", ", bytes, " bytes): ", why,
        count == reports_per_resource ? " (further reports suppressed)" : "", "\n");
    std::fputs(msg.c_str(), stderr);
  } catch (...) {  // NOLINT(bugprone-empty-catch): a diagnostic must not throw from deallocate
  }
}

std::string describe_free(std::size_t pool_bytes, free_stats const& stats)
{
  auto const frag = stats.free_bytes == 0
                        ? 0.0
                        : 100.0 * (1.0 - static_cast<double>(stats.largest_bytes) /
                                             static_cast<double>(stats.free_bytes));
  return format("pool size ", bytes_str(pool_bytes), ", free ", bytes_str(stats.free_bytes), " in ",
                stats.blocks, " blocks, largest free block ", bytes_str(stats.largest_bytes),
                " (fragmentation ", static_cast<int>(frag), "%)");
}

void check_blocks(char const* resource, std::vector<free_block> blocks,
                  std::vector<free_block> const& chunks)
{
  for (auto const& b : blocks) {
    GPUMEM_INVARIANT(
        b.chunk < chunks.size(), resource,
        format("block ", ptr_str(b.ptr), " names chunk ", b.chunk, " of ", chunks.size()));
    auto const& c = chunks[b.chunk];
    GPUMEM_INVARIANT(c.ptr <= b.ptr && b.end() <= c.end(), resource,
                     format("block ", ptr_str(b.ptr), " (", b.size, " B) outside its chunk ",
                            ptr_str(c.ptr), " (", c.size, " B)"));
  }
  std::sort(blocks.begin(), blocks.end(),
            [](free_block const& a, free_block const& b) { return a.ptr < b.ptr; });
  for (std::size_t i = 1; i < blocks.size(); ++i) {
    GPUMEM_INVARIANT(
        blocks[i - 1].end() <= blocks[i].ptr, resource,
        format("blocks ", ptr_str(blocks[i - 1].ptr), " and ", ptr_str(blocks[i].ptr), " overlap"));
  }
}

}  // namespace gpumem::detail
