// Makers of the stream-ordered-allocator resources (cuda_async, cuda_async_view) for the
// conformance suite. They run on both backends: on the host backend over the stand-in's model of
// CUDA memory pools (src/runtime/simulated/host_pool_model.hpp), on a GPU over the driver's pools.
#pragma once

#include <conformance/conformance.hpp>

#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/cuda_async_view_memory_resource.hpp>
#include <gpumem/pool/memory_pool.hpp>

namespace gpumem::test {

/// cuda_async_memory_resource with a 64 MiB initial pool and the default release threshold
/// (total memory). Not the default initial size (half the free memory): the suite's processes
/// run in parallel under ctest -j and would each reserve half the GPU. The defaults are checked
/// in tests/gpu/memory_pool_gpu_test.cu.
struct cuda_async_maker {
  static constexpr char const* name = "cuda_async";
  static constexpr bool thread_safe = true;
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    return std::make_shared<mr::cuda_async_memory_resource>(std::size_t{64} << 20, std::nullopt,
                                                            std::nullopt, b.runtime());
  }
};

/// cuda_async_view_memory_resource over an explicitly created pool kept alive beside it.
struct cuda_async_view_maker {
  static constexpr char const* name = "cuda_async_view";
  static constexpr bool thread_safe = true;
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    struct pool_and_view {
      explicit pool_and_view(detail::runtime& rt)
          : pool{pool_properties{.location = pool_location::device(rt.current_device())}, rt},
            view{pool.handle(), rt}
      {
      }
      memory_pool pool;
      mr::cuda_async_view_memory_resource view;
    };
    auto both = std::make_shared<pool_and_view>(b.runtime());
    return {both, &both->view};
  }
};

}  // namespace gpumem::test
