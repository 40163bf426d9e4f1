// current_pool_memory_resource: each allocation from the current pool of the stream's device.
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/current_pool_memory_resource.hpp>
#include <gpumem/pool/device_pools.hpp>

#include <cuda_runtime_api.h>

namespace gpumem::mr {
namespace {

int device_of(gpumem::runtime& rt, cuda_stream_view stream)
{
  int device{};
  auto const st = rt.stream_get_device(stream.value(), &device);
  if (st != cudaSuccess) {
    detail::throw_cuda_failure(st, detail::format("current_pool_memory_resource: cannot tell the "
                                                  "device of stream ",
                                                  static_cast<void*>(stream.value())));
  }
  return device;
}

}  // namespace

void* current_pool_memory_resource::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  return current_pool(cuda_device_id{device_of(*runtime_, stream)}, *runtime_)
      .allocate(bytes, stream);
}

void current_pool_memory_resource::do_deallocate(void* ptr, std::size_t,
                                                 cuda_stream_view stream) noexcept
{
  (void)runtime_->free_async(ptr, stream.value());
}

bool current_pool_memory_resource::do_is_equal(device_memory_resource const& other) const noexcept
{
  auto const* o = dynamic_cast<current_pool_memory_resource const*>(&other);
  return o != nullptr && o->runtime_ == runtime_;
}

}  // namespace gpumem::mr
