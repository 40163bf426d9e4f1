// gpumem/device_scalar.hpp — one object of type T in device memory, allocated and freed in
// stream order on a resource (RMM's rmm::device_scalar<T>): a result a kernel writes and the host
// reads back, a flag, a counter.
//
//   gpumem::device_scalar<int> count{0, stream};    // set to 0 on `stream`
//   kernel<<<g, b, 0, stream>>>(count.data());
//   int n = count.value(stream);                    // synchronizes `stream`
//
// T must be trivially copyable. A device_uvector<T> of one element underneath (the same stream
// rules). Not thread-safe (one owner).
#pragma once

#include <gpumem/device_uvector.hpp>

namespace gpumem {

template <typename T>
class device_scalar {
 public:
  using value_type      = typename device_uvector<T>::value_type;
  using reference       = typename device_uvector<T>::reference;
  using const_reference = typename device_uvector<T>::const_reference;
  using pointer         = typename device_uvector<T>::pointer;
  using const_pointer   = typename device_uvector<T>::const_pointer;

  device_scalar(device_scalar const&)                = delete;
  device_scalar& operator=(device_scalar const&)     = delete;
  device_scalar(device_scalar&&) noexcept            = default;
  device_scalar& operator=(device_scalar&&) noexcept = default;
  ~device_scalar()                                   = default;

  /// An uninitialized object.
  explicit device_scalar(cuda_stream_view stream,
                         device_async_resource_ref mr = mr::get_current_device_resource_ref(),
                         gpumem::runtime& rt          = gpumem::cuda_device())
      : storage_{1, stream, mr, rt}
  {
  }
  /// An object set to `initial_value` on `stream` (copied from the host before this returns).
  device_scalar(value_type const& initial_value, cuda_stream_view stream,
                device_async_resource_ref mr = mr::get_current_device_resource_ref(),
                gpumem::runtime& rt          = gpumem::cuda_device())
      : storage_{1, stream, mr, rt}
  {
    storage_.set_element(0, initial_value, stream);
  }
  /// A copy of `other`'s object, on `stream`.
  device_scalar(device_scalar const& other, cuda_stream_view stream,
                device_async_resource_ref mr = mr::get_current_device_resource_ref(),
                gpumem::runtime& rt          = gpumem::cuda_device())
      : storage_{other.storage_, stream, mr, rt}
  {
  }

  /// The object, copied to the host (waits for `stream`).
  [[nodiscard]] value_type value(cuda_stream_view stream) const
  {
    return storage_.front_element(stream);
  }
  /// Copies `value` in on `stream`; `value` must stay alive until the stream gets there.
  void set_value_async(value_type const& value, cuda_stream_view stream)
  {
    storage_.set_element_async(0, value, stream);
  }
  void set_value_async(value_type const&&, cuda_stream_view) = delete;
  /// Sets the object's bytes to zero on `stream`.
  void set_value_to_zero_async(cuda_stream_view stream)
  {
    storage_.set_element_to_zero_async(0, stream);
  }

  [[nodiscard]] pointer data() noexcept { return storage_.data(); }
  [[nodiscard]] const_pointer data() const noexcept { return storage_.data(); }
  [[nodiscard]] static constexpr std::size_t size() noexcept { return 1; }
  [[nodiscard]] cuda_stream_view stream() const noexcept { return storage_.stream(); }
  void set_stream(cuda_stream_view stream) noexcept { storage_.set_stream(stream); }
  [[nodiscard]] device_async_resource_ref memory_resource() const noexcept
  {
    return storage_.memory_resource();
  }

 private:
  device_uvector<T> storage_;
};

}  // namespace gpumem
