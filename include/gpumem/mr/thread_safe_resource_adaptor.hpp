// gpumem/mr/thread_safe_resource_adaptor.hpp — makes any upstream thread-safe with one mutex.
//
// Every allocate and deallocate of the upstream runs under `mutex_`, so an upstream that is not
// thread-safe can be shared between threads. The lock serializes: use it for correctness, not
// speed (suballocators that are thread-safe by design do not need it).
//
// Thread safety: all members are thread-safe.
// Throws: logic_error for a null upstream pointer; whatever the upstream throws.
#pragma once

#include <gpumem/error.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/resource_ref.hpp>

#include <cstddef>
#include <mutex>

namespace gpumem::mr {

template <typename Upstream>
class thread_safe_resource_adaptor
    : public device_memory_resource,
      public gpumem::detail::forward_properties<thread_safe_resource_adaptor<Upstream>, Upstream> {
 public:
  using lock_t = std::lock_guard<std::mutex>;

  thread_safe_resource_adaptor(device_async_resource_ref upstream) : upstream_{upstream} {}

  /// Throws logic_error when `upstream` is null.
  thread_safe_resource_adaptor(Upstream* upstream)
      : upstream_{to_device_async_resource_ref_checked(upstream)}
  {
    this->link_upstream(upstream);
  }

  thread_safe_resource_adaptor(thread_safe_resource_adaptor const&)            = delete;
  thread_safe_resource_adaptor& operator=(thread_safe_resource_adaptor const&) = delete;
  ~thread_safe_resource_adaptor() override                                     = default;

  [[nodiscard]] device_async_resource_ref get_upstream_resource() const noexcept
  {
    return upstream_;
  }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    lock_t lock{mutex_};
    return gpumem::detail::async_allocate(upstream_, bytes, CUDA_ALLOCATION_ALIGNMENT, stream);
  }

  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    lock_t lock{mutex_};
    gpumem::detail::async_deallocate(upstream_, ptr, bytes, CUDA_ALLOCATION_ALIGNMENT, stream);
  }

  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override
  {
    if (this == &other) { return true; }
    auto const* o = dynamic_cast<thread_safe_resource_adaptor const*>(&other);
    return o != nullptr && o->upstream_ == upstream_;
  }

  device_async_resource_ref upstream_;
  std::mutex mutex_;
};

static_assert(gpumem::detail::async_resource_with<
              thread_safe_resource_adaptor<device_memory_resource>, cuda::mr::device_accessible>);

}  // namespace gpumem::mr
