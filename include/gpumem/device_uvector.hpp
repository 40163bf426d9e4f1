// gpumem/device_uvector.hpp — a typed, uninitialized array in device memory, allocated and freed
// in stream order on a resource (RMM's rmm::device_uvector<T>).
//
//   gpumem::device_uvector<float> v{n, stream};      // n floats, not initialized
//   v.set_element_async(0, x, stream);               // x must live until the copy is done
//   float y = v.element(0, stream);                  // synchronizes `stream`
//
// T must be trivially copyable: elements are moved by byte copies and never constructed or
// destroyed, which is why the array is uninitialized. Built on device_buffer (the same stream and
// capacity rules; release() hands the memory over as one). Element access out of range throws
// gpumem::out_of_range naming the index and the size. Not thread-safe (one owner).
#pragma once

#include <gpumem/detail/format.hpp>
#include <gpumem/device_buffer.hpp>
#include <gpumem/error.hpp>

#include <cstddef>
#include <iterator>
#include <type_traits>
#include <utility>

namespace gpumem {

template <typename T>
class device_uvector {
  static_assert(std::is_trivially_copyable_v<T>,
                "device_uvector needs a trivially copyable element type: its elements are copied "
                "as bytes and never constructed");

 public:
  using value_type             = T;
  using size_type              = std::size_t;
  using reference              = value_type&;
  using const_reference        = value_type const&;
  using pointer                = value_type*;
  using const_pointer          = value_type const*;
  using iterator               = pointer;
  using const_iterator         = const_pointer;
  using reverse_iterator       = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  device_uvector()                                     = default;
  device_uvector(device_uvector const&)                = delete;
  device_uvector& operator=(device_uvector const&)     = delete;
  device_uvector(device_uvector&&) noexcept            = default;
  device_uvector& operator=(device_uvector&&) noexcept = default;
  ~device_uvector()                                    = default;

  /// `size` elements, uninitialized.
  device_uvector(size_type size, cuda_stream_view stream,
                 device_async_resource_ref mr = mr::get_current_device_resource_ref(),
                 gpumem::runtime& rt          = gpumem::cuda_device())
      : storage_{bytes_of(size), stream, mr, rt}
  {
  }
  /// A copy of `other`'s elements, on `stream`.
  device_uvector(device_uvector const& other, cuda_stream_view stream,
                 device_async_resource_ref mr = mr::get_current_device_resource_ref(),
                 gpumem::runtime& rt          = gpumem::cuda_device())
      : storage_{other.storage_, stream, mr, rt}
  {
  }

  [[nodiscard]] pointer element_ptr(size_type i) noexcept { return data() + i; }
  [[nodiscard]] const_pointer element_ptr(size_type i) const noexcept { return data() + i; }

  /// Copies `value` into element `i` on `stream`. The copy reads `value` when the stream gets
  /// there: it must stay alive until then (hence no temporaries).
  void set_element_async(size_type i, value_type const& value, cuda_stream_view stream)
  {
    check_index(i, "set_element_async");
    storage_.runtime().memcpy_async(element_ptr(i), &value, sizeof(T), stream.value());
  }
  void set_element_async(size_type, value_type const&&, cuda_stream_view) = delete;
  /// Sets element `i`'s bytes to zero on `stream`.
  void set_element_to_zero_async(size_type i, cuda_stream_view stream)
  {
    check_index(i, "set_element_to_zero_async");
    storage_.runtime().memset_async(element_ptr(i), 0, sizeof(T), stream.value());
  }
  /// set_element_async, then waits for `stream`.
  void set_element(size_type i, value_type const& value, cuda_stream_view stream)
  {
    set_element_async(i, value, stream);
    storage_.runtime().stream_synchronize(stream.value());
  }
  /// Element `i`, copied to the host (waits for `stream`).
  [[nodiscard]] value_type element(size_type i, cuda_stream_view stream) const
  {
    check_index(i, "element");
    value_type out;
    storage_.runtime().memcpy_async(&out, element_ptr(i), sizeof(T), stream.value());
    storage_.runtime().stream_synchronize(stream.value());
    return out;
  }
  [[nodiscard]] value_type front_element(cuda_stream_view stream) const
  {
    return element(0, stream);
  }
  [[nodiscard]] value_type back_element(cuda_stream_view stream) const
  {
    return element(size() - 1, stream);
  }

  /// Makes the capacity at least `new_capacity` elements (contents kept).
  void reserve(size_type new_capacity, cuda_stream_view stream)
  {
    storage_.reserve(bytes_of(new_capacity), stream);
  }
  /// Makes the size `new_size`; new elements are uninitialized.
  void resize(size_type new_size, cuda_stream_view stream)
  {
    storage_.resize(bytes_of(new_size), stream);
  }
  void shrink_to_fit(cuda_stream_view stream) { storage_.shrink_to_fit(stream); }
  /// Hands the memory over as a device_buffer; this vector is left empty.
  [[nodiscard]] device_buffer release() noexcept { return std::move(storage_); }

  [[nodiscard]] size_type capacity() const noexcept { return storage_.capacity() / sizeof(T); }
  [[nodiscard]] pointer data() noexcept { return static_cast<pointer>(storage_.data()); }
  [[nodiscard]] const_pointer data() const noexcept
  {
    return static_cast<const_pointer>(storage_.data());
  }
  [[nodiscard]] iterator begin() noexcept { return data(); }
  [[nodiscard]] const_iterator begin() const noexcept { return data(); }
  [[nodiscard]] const_iterator cbegin() const noexcept { return data(); }
  [[nodiscard]] iterator end() noexcept { return data() + size(); }
  [[nodiscard]] const_iterator end() const noexcept { return data() + size(); }
  [[nodiscard]] const_iterator cend() const noexcept { return data() + size(); }
  [[nodiscard]] reverse_iterator rbegin() noexcept { return reverse_iterator{end()}; }
  [[nodiscard]] reverse_iterator rend() noexcept { return reverse_iterator{begin()}; }
  [[nodiscard]] size_type size() const noexcept { return storage_.size() / sizeof(T); }
  [[nodiscard]] std::int64_t ssize() const noexcept { return static_cast<std::int64_t>(size()); }
  [[nodiscard]] bool is_empty() const noexcept { return size() == 0; }
  [[nodiscard]] device_async_resource_ref memory_resource() const noexcept
  {
    return storage_.memory_resource();
  }
  [[nodiscard]] cuda_stream_view stream() const noexcept { return storage_.stream(); }
  void set_stream(cuda_stream_view stream) noexcept { storage_.set_stream(stream); }

 private:
  static size_type bytes_of(size_type count)
  {
    if (count > static_cast<size_type>(-1) / sizeof(T)) {
      throw out_of_memory{detail::format("device_uvector: ", count, " elements of ", sizeof(T),
                                         " bytes do not fit in the address space")};
    }
    return count * sizeof(T);
  }
  void check_index(size_type i, char const* what) const
  {
    if (i >= size()) {
      throw out_of_range{detail::format("device_uvector::", what, ": element ", i,
                                        " is out of range (size ", size(), ")")};
    }
  }

  device_buffer storage_;
};

}  // namespace gpumem
