// Over-aligned allocations of device_memory_resource (see gpumem/detail/over_aligned.hpp).
#include <gpumem/detail/over_aligned.hpp>

#include <gpumem/align.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <cstdint>
#include <iostream>
#include <mutex>
#include <unordered_map>

namespace gpumem::detail {
namespace {

/// One over-aligned allocation: what the resource returned and which resource it was.
struct over_aligned_block {
  void* original;
  mr::device_memory_resource const* owner;
};

/// aligned address -> blocks. Two live blocks share an address only when one resource's
/// over-aligned allocation starts a block another resource carved from it; owners tell them apart.
/// Invariant: every entry is a live allocation of `owner` of padded_size(bytes, alignment) bytes.
struct over_aligned_table {
  std::mutex mutex;
  std::unordered_multimap<void*, over_aligned_block> blocks;
};

over_aligned_table& table()
{
  // Never destroyed: resources with static storage may free over-aligned memory during exit.
  static auto* const instance = new over_aligned_table;
  return *instance;
}

std::size_t padded_size(std::size_t bytes, std::size_t alignment) noexcept
{
  return align_up(bytes, CUDA_ALLOCATION_ALIGNMENT) + (alignment - CUDA_ALLOCATION_ALIGNMENT);
}

/// The block for `ptr` owned by `mr`, else by a resource equal to `mr`; end() if none.
auto find_block(over_aligned_table& t, void* ptr, mr::device_memory_resource const& mr)
{
  auto [first, last] = t.blocks.equal_range(ptr);
  for (auto it = first; it != last; ++it) {
    if (it->second.owner == &mr) { return it; }
  }
  for (auto it = first; it != last; ++it) {
    if (it->second.owner->is_equal(mr)) { return it; }
  }
  return t.blocks.end();
}

}  // namespace

void* over_aligned_allocate(mr::device_memory_resource& mr, std::size_t bytes,
                            std::size_t alignment, cuda_stream_view stream)
{
  GPUMEM_EXPECTS(
      bytes <= SIZE_MAX - alignment, out_of_memory,
      format("cannot allocate ", bytes, " bytes aligned to ", alignment, ": size overflows"));
  auto const padded = padded_size(bytes, alignment);
  void* original    = mr.allocate(padded, stream);
  auto* aligned =
      reinterpret_cast<void*>(align_up(reinterpret_cast<std::uintptr_t>(original), alignment));
  try {
    auto& t = table();
    std::lock_guard lock{t.mutex};
    t.blocks.emplace(aligned, over_aligned_block{original, &mr});
  } catch (...) {
    mr.deallocate(original, padded, stream);
    throw;
  }
  return aligned;
}

void over_aligned_deallocate(mr::device_memory_resource& mr, void* ptr, std::size_t bytes,
                             std::size_t alignment, cuda_stream_view stream) noexcept
{
  void* original = nullptr;
  {
    auto& t = table();
    std::lock_guard lock{t.mutex};
    auto it = find_block(t, ptr, mr);
    if (it != t.blocks.end()) {
      original = it->second.original;
      t.blocks.erase(it);
    }
  }
  if (original == nullptr) {
    std::cerr << format("gpumem: deallocate(", ptr, ", ", bytes, ", alignment ", alignment,
                        "): not an allocation of this resource with that alignment; ignored\n");
    return;
  }
  mr.deallocate(original, padded_size(bytes, alignment), stream);
}

std::size_t over_aligned_live_count() noexcept
{
  auto& t = table();
  std::lock_guard lock{t.mutex};
  return t.blocks.size();
}

void report_deallocate_failure(void* ptr, std::size_t bytes, char const* what) noexcept
{
  try {
    std::cerr << format("gpumem: deallocate(", ptr, ", ", bytes,
                        ") failed and the memory may leak: ", what, "\n");
  } catch (...) {  // nothing left to report with
  }
}

}  // namespace gpumem::detail
