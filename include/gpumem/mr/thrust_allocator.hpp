// gpumem/mr/thrust_allocator.hpp — a Thrust allocator over a device resource ref and a stream.
//
//   thrust::device_vector<int, thrust_allocator<int>> v(n, 0, thrust_allocator<int>{stream, mr});
// Typed (allocates objects of T) and freely rebindable. It records the current device when
// constructed and makes that device current (for the call only) in allocate and deallocate, so it
// may be used from any device with a resource valid on the recorded one. Defaults: the
// current device's resource and the default stream. Requires Thrust (compile with nvcc).
//
// Thread safety: that of the resource. Throws: out_of_memory when num * sizeof(T) overflows;
// whatever the resource throws.
#pragma once

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/scoped_current_device.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/resource_ref.hpp>

#include <thrust/device_malloc_allocator.h>
#include <thrust/device_ptr.h>

#include <cstddef>
#include <limits>
#include <optional>

namespace gpumem::mr {

template <typename T>
class thrust_allocator : public thrust::device_malloc_allocator<T> {
 public:
  using Base      = thrust::device_malloc_allocator<T>;
  using pointer   = typename Base::pointer;
  using size_type = typename Base::size_type;

  /// The type of this allocator for objects of U.
  template <typename U>
  struct rebind {
    using other = thrust_allocator<U>;
  };

  /// The current device's resource, the default stream.
  thrust_allocator() = default;

  /// The current device's resource, on `stream`.
  explicit thrust_allocator(cuda_stream_view stream) : stream_{stream} {}

  thrust_allocator(cuda_stream_view stream, device_async_resource_ref mr) : stream_{stream}, mr_{mr}
  {
  }

  /// Copies the resource, stream and device of `other`.
  template <typename U>
  thrust_allocator(thrust_allocator<U> const& other)  // NOLINT
      : stream_{other.stream()}, mr_{other.get_upstream_resource()}, device_{other.device()}
  {
  }

  /// Storage for `num` objects of T on stream(), with device() current during the call.
  pointer allocate(size_type num)
  {
    GPUMEM_EXPECTS(num <= std::numeric_limits<std::size_t>::max() / sizeof(T), out_of_memory,
                   detail::format("thrust_allocator: cannot allocate ", num, " objects of ",
                                  sizeof(T), " bytes: size overflows"));
    detail::scoped_current_device const on_device{device_.value()};
    return thrust::device_pointer_cast(static_cast<T*>(
        gpumem::detail::async_allocate(mr_, num * sizeof(T), CUDA_ALLOCATION_ALIGNMENT, stream_)));
  }

  /// Frees storage from allocate(num), with device() current during the call.
  void deallocate(pointer ptr, size_type num) noexcept
  {
    std::optional<detail::scoped_current_device> on_device;
    try {
      on_device.emplace(device_.value());
    } catch (...) {  // NOLINT(bugprone-empty-catch): free anyway; the resource reports misuse
    }
    gpumem::detail::async_deallocate(mr_, thrust::raw_pointer_cast(ptr), num * sizeof(T),
                                     CUDA_ALLOCATION_ALIGNMENT, stream_);
  }

  [[nodiscard]] device_async_resource_ref get_upstream_resource() const noexcept { return mr_; }
  [[nodiscard]] cuda_stream_view stream() const noexcept { return stream_; }
  /// The device that was current when this allocator (or the one it copies) was made.
  [[nodiscard]] cuda_device_id device() const noexcept { return device_; }

  friend void get_property(thrust_allocator const&, cuda::mr::device_accessible) noexcept {}

  /// Equal when resource and stream are equal.
  friend bool operator==(thrust_allocator const& a, thrust_allocator const& b)
  {
    return a.mr_ == b.mr_ && a.stream_ == b.stream_;
  }
  friend bool operator!=(thrust_allocator const& a, thrust_allocator const& b) { return !(a == b); }

 private:
  cuda_stream_view stream_{};
  device_async_resource_ref mr_{get_current_device_resource_ref()};
  cuda_device_id device_{get_current_cuda_device()};
};

}  // namespace gpumem::mr
