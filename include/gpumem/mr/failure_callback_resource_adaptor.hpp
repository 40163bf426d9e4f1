// gpumem/mr/failure_callback_resource_adaptor.hpp — calls back when an allocation fails.
//
// When the upstream's allocate throws ExceptionType, the adaptor calls
// `callback(bytes, callback_arg)`: true retries the allocation, false rethrows the exception.
// Exceptions of other types pass through untouched. A callback that always returns true retries
// forever: count retries in `callback_arg` (e.g. retry once, then return false).
//
// Thread safety: as thread-safe as the upstream and the callback (the adaptor has no state).
// Throws: logic_error for a null upstream pointer; ExceptionType when the callback gives up.
#pragma once

#include <gpumem/error.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/resource_ref.hpp>

#include <cstddef>
#include <functional>
#include <utility>

namespace gpumem::mr {

/// bool callback(std::size_t bytes, void* callback_arg): true = retry, false = rethrow.
using failure_callback_t = std::function<bool(std::size_t, void*)>;

template <typename Upstream, typename ExceptionType = out_of_memory>
class failure_callback_resource_adaptor
    : public device_memory_resource,
      public gpumem::detail::forward_properties<
          failure_callback_resource_adaptor<Upstream, ExceptionType>, Upstream> {
 public:
  using exception_type = ExceptionType;

  failure_callback_resource_adaptor(device_async_resource_ref upstream, failure_callback_t callback,
                                    void* callback_arg)
      : upstream_{upstream}, callback_{std::move(callback)}, callback_arg_{callback_arg}
  {
  }

  /// Throws logic_error when `upstream` is null.
  failure_callback_resource_adaptor(Upstream* upstream, failure_callback_t callback,
                                    void* callback_arg)
      : failure_callback_resource_adaptor{to_device_async_resource_ref_checked(upstream),
                                          std::move(callback), callback_arg}
  {
    this->link_upstream(upstream);
  }

  failure_callback_resource_adaptor(failure_callback_resource_adaptor&&) noexcept = default;
  failure_callback_resource_adaptor& operator=(failure_callback_resource_adaptor&&) noexcept =
      default;
  failure_callback_resource_adaptor(failure_callback_resource_adaptor const&)            = delete;
  failure_callback_resource_adaptor& operator=(failure_callback_resource_adaptor const&) = delete;
  ~failure_callback_resource_adaptor() override                                          = default;

  [[nodiscard]] device_async_resource_ref get_upstream_resource() const noexcept
  {
    return upstream_;
  }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    while (true) {
      try {
        return gpumem::detail::async_allocate(upstream_, bytes, CUDA_ALLOCATION_ALIGNMENT, stream);
      } catch (exception_type const&) {
        if (!callback_(bytes, callback_arg_)) { throw; }
      }
    }
  }

  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    gpumem::detail::async_deallocate(upstream_, ptr, bytes, CUDA_ALLOCATION_ALIGNMENT, stream);
  }

  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override
  {
    if (this == &other) { return true; }
    auto const* o = dynamic_cast<failure_callback_resource_adaptor const*>(&other);
    return o != nullptr && o->upstream_ == upstream_;
  }

  device_async_resource_ref upstream_;
  failure_callback_t callback_;
  void* callback_arg_;
};

static_assert(
    gpumem::detail::async_resource_with<failure_callback_resource_adaptor<device_memory_resource>,
                                        cuda::mr::device_accessible>);

}  // namespace gpumem::mr
