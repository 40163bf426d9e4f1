// Makers of the stream-ordered-allocator resources (cuda_async, cuda_async_view) for the
// conformance suite. They need CUDA memory pools, which the host stand-in does not model: on the
// host backend the makers throw unsupported (the suite skips with that reason).
#pragma once

#include <conformance/conformance.hpp>

#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/cuda_async_view_memory_resource.hpp>
#include <gpumem/pool/memory_pool.hpp>

#include <cstring>

namespace gpumem::test {

inline void require_cuda_backend_for_pools(backend& b)
{
  if (std::strcmp(b.name(), "cuda") != 0) {
    throw unsupported{
        "CUDA memory pools (cudaMallocAsync) exist only on a GPU; the host "
        "stand-in does not model them"};
  }
}

/// cuda_async_memory_resource with a 64 MiB initial pool and the default release threshold
/// (total memory). Not the default initial size (half the free memory): the suite's processes
/// run in parallel under ctest -j and would each reserve half the GPU. The defaults are checked
/// in tests/gpu/memory_pool_gpu_test.cu.
struct cuda_async_maker {
  static constexpr char const* name = "cuda_async";
  static constexpr bool thread_safe = true;
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    require_cuda_backend_for_pools(b);
    return std::make_shared<mr::cuda_async_memory_resource>(std::size_t{64} << 20);
  }
};

/// cuda_async_view_memory_resource over an explicitly created pool kept alive beside it.
struct cuda_async_view_maker {
  static constexpr char const* name = "cuda_async_view";
  static constexpr bool thread_safe = true;
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    require_cuda_backend_for_pools(b);
    struct pool_and_view {
      memory_pool pool{
          pool_properties{.location = pool_location::device(get_current_cuda_device().value())}};
      mr::cuda_async_view_memory_resource view{pool.handle()};
    };
    auto both = std::make_shared<pool_and_view>();
    return {both, &both->view};
  }
};

}  // namespace gpumem::test
