// caching_memory_resource: the caching core (CUB's bins and cache limit) over an upstream resource.
#include <gpumem/align.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/mr/caching_memory_resource.hpp>

#include <iostream>

namespace gpumem::mr {

void* caching_memory_resource::upstream_source::allocate(int, std::size_t bytes,
                                                         cudaStream_t stream)
{
  return gpumem::detail::async_allocate(upstream, bytes, CUDA_ALLOCATION_ALIGNMENT,
                                        ::cuda::stream_ref{stream});
}

void caching_memory_resource::upstream_source::free(int, void* ptr, std::size_t bytes,
                                                    cudaStream_t stream) noexcept
{
  gpumem::detail::async_deallocate(upstream, ptr, bytes, CUDA_ALLOCATION_ALIGNMENT,
                                   ::cuda::stream_ref{stream});
}

caching_memory_resource::caching_memory_resource(device_async_resource_ref upstream,
                                                 caching_memory_resource_options options,
                                                 gpumem::runtime& runtime)
    : source_{upstream},
      device_{runtime.device_count() > 0 ? runtime.current_device() : 0},
      core_{detail::caching::bin_layout{options.bin_growth, options.min_bin, options.max_bin},
            options.max_cached_bytes, source_, runtime, false}
{
  core_.set_debug(options.debug);
}

caching_memory_resource::~caching_memory_resource()
{
  try {
    core_.free_all_cached();
  } catch (...) {  // NOLINT(bugprone-empty-catch): destructors do not throw
  }
  auto const live = core_.release_live();  // what it owns goes back upstream, said on stderr
  if (live.count == 0) { return; }
  try {
    std::cerr << detail::format("gpumem::caching_memory_resource: destroyed with ", live.count,
                                " block", live.count == 1 ? "" : "s", " (", live.bytes,
                                " B) still allocated; freed to the upstream (using them now "
                                "is a use after free)\n");
  } catch (...) {  // NOLINT(bugprone-empty-catch): reporting must not throw
  }
}

void* caching_memory_resource::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  return core_.allocate(device_, bytes, stream.value());
}

void caching_memory_resource::do_deallocate(void* ptr, std::size_t bytes,
                                            cuda_stream_view stream) noexcept
{
  char const* problem = nullptr;
  try {
    std::size_t block_bytes{};
    auto const status = core_.deallocate(device_, ptr, stream.value(), &block_bytes);
    if (status == detail::caching::free_status::unknown_pointer) {
      problem = "unknown pointer or double free (ignored)";
    } else if (core_.layout().classify(bytes).bytes != block_bytes) {
      problem = "wrong size (the block was freed with its own size)";
    }
  } catch (...) {
    problem = "runtime failure while freeing";
  }
  if (problem == nullptr) { return; }
  ++bad_deallocations_;
  try {
    std::cerr << detail::format("gpumem::caching_memory_resource: deallocate(",
                                detail::ptr_str(ptr), ", ", bytes, " B): ", problem, '\n');
  } catch (...) {  // NOLINT(bugprone-empty-catch): reporting must not throw
  }
}

}  // namespace gpumem::mr
