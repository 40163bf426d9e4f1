// gpumem/mr/current_pool_memory_resource.hpp — device memory from the pool that is current when
// each allocation is made (what cudaMallocAsync without a pool does).
//
// Each allocate uses the current pool of the device the stream belongs to, as it is at that moment
// (cudaDeviceSetMemPool / set_current_pool / scoped_current_pool change it; the default is the
// device's default pool); the current device does not matter. Frees go back to the pool the
// allocation came from (cudaFreeAsync).
// Thread-safe. Throws out_of_memory (naming the pool and its device) or cuda_error. Equal to
// every other instance over the same runtime.
#pragma once

#include <gpumem/runtime.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <cstddef>

namespace gpumem::mr {

class current_pool_memory_resource final : public device_memory_resource {
 public:
  explicit current_pool_memory_resource(gpumem::runtime& rt = gpumem::cuda_device()) noexcept
      : runtime_{&rt}
  {
  }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;

  gpumem::runtime* runtime_;
};

static_assert(
    gpumem::detail::async_resource_with<current_pool_memory_resource, cuda::mr::device_accessible>);

}  // namespace gpumem::mr
