// gpumem/mr/callback_memory_resource.hpp — a device resource whose allocate and deallocate are
// user callbacks. The callbacks' thread safety is the resource's; an exception from the deallocate
// callback is reported on stderr and swallowed (deallocate never throws). Move-only.
#pragma once

#include <gpumem/mr/device_memory_resource.hpp>

#include <functional>

namespace gpumem::mr {

using allocate_callback_t   = std::function<void*(std::size_t, cuda_stream_view, void*)>;
using deallocate_callback_t = std::function<void(void*, std::size_t, cuda_stream_view, void*)>;

class callback_memory_resource final : public device_memory_resource {
 public:
  callback_memory_resource(allocate_callback_t allocate_callback,
                           deallocate_callback_t deallocate_callback,
                           void* allocate_callback_arg   = nullptr,
                           void* deallocate_callback_arg = nullptr) noexcept
      : allocate_callback_{std::move(allocate_callback)},
        deallocate_callback_{std::move(deallocate_callback)},
        allocate_callback_arg_{allocate_callback_arg},
        deallocate_callback_arg_{deallocate_callback_arg}
  {
  }

  callback_memory_resource(callback_memory_resource const&)                = delete;
  callback_memory_resource& operator=(callback_memory_resource const&)     = delete;
  callback_memory_resource(callback_memory_resource&&) noexcept            = default;
  callback_memory_resource& operator=(callback_memory_resource&&) noexcept = default;
  ~callback_memory_resource() override                                     = default;

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    return allocate_callback_(bytes, stream, allocate_callback_arg_);
  }

  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) override
  {
    deallocate_callback_(ptr, bytes, stream, deallocate_callback_arg_);
  }

  allocate_callback_t allocate_callback_;
  deallocate_callback_t deallocate_callback_;
  void* allocate_callback_arg_;
  void* deallocate_callback_arg_;
};

static_assert(
    gpumem::detail::async_resource_with<callback_memory_resource, cuda::mr::device_accessible>);

}  // namespace gpumem::mr
