// gpumem/detail/over_aligned.hpp — allocations aligned beyond the 256 bytes every device resource
// guarantees, for device_memory_resource's allocate(bytes, alignment) family. Not API.
//
// Such an allocation takes `bytes + alignment - 256` bytes from the resource itself and returns
// the first `alignment`-aligned address inside; a process-wide table maps that address back to the
// one the resource returned. The table is global, not per resource, because equal resources (two
// cuda_memory_resource objects, a copy of a view) may free each other's memory.
//
// Thread safety: all functions are thread-safe (one mutex; this is not a hit path).
// Errors: over_aligned_allocate throws what the resource throws, out_of_memory when the padded
// size overflows; over_aligned_deallocate never throws.
#pragma once

#include <gpumem/cuda_stream_view.hpp>

#include <cstddef>

namespace gpumem::mr {
class device_memory_resource;
}

namespace gpumem::detail {

/// `bytes` (> 0) from `mr`, aligned to `alignment` (a power of two above 256).
[[nodiscard]] void* over_aligned_allocate(mr::device_memory_resource& mr, std::size_t bytes,
                                          std::size_t alignment, cuda_stream_view stream);

/// Frees `ptr` from over_aligned_allocate(mr or a resource equal to it, bytes, alignment).
/// A pointer the table does not know is reported on stderr and left alone.
void over_aligned_deallocate(mr::device_memory_resource& mr, void* ptr, std::size_t bytes,
                             std::size_t alignment, cuda_stream_view stream) noexcept;

/// Number of live over-aligned allocations (all resources), for tests.
[[nodiscard]] std::size_t over_aligned_live_count() noexcept;

/// Reports on stderr that a resource's do_deallocate threw (deallocate never throws).
void report_deallocate_failure(void* ptr, std::size_t bytes, char const* what) noexcept;

}  // namespace gpumem::detail
