// gpumem/device_buffer.hpp — untyped, uninitialized device memory owned by one object, allocated
// and freed in stream order on a resource (RMM's rmm::device_buffer).
//
//   gpumem::device_buffer buf{1 << 20, stream};             // 1 MiB from the current resource
//   gpumem::device_buffer copy{host_ptr, n, stream, mr};    // n bytes copied from anywhere
//   buf.resize(2 << 20, stream);                            // grows: new memory, contents kept
//
// The memory is usable on `stream` at once and on other streams once they are ordered after it.
// Every allocation, copy and free of a buffer happens on its stream (`stream()`), which each
// call that takes a stream sets; the destructor frees on it. A buffer's size may be less than
// its capacity (what is allocated): resize() within the capacity allocates nothing, reserve()
// grows the capacity, shrink_to_fit() makes it equal to the size.
//
// Errors: what the resource throws (out_of_memory, ...); cuda_error when a copy fails. A failed
// call leaves the buffer as it was. Moves never throw; a moved-from buffer is empty and keeps
// its resource. Copies and frees go through the runtime given at construction (default: the real
// CUDA runtime; a simulated_device runs them on the host). Not thread-safe (one owner).
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/runtime.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/resource_ref.hpp>

#include <cstddef>
#include <cstdint>

namespace gpumem {

class device_buffer {
 public:
  /// An empty buffer (no memory) on the default stream and the current device's resource.
  device_buffer();
  /// `size` bytes, uninitialized.
  device_buffer(std::size_t size, cuda_stream_view stream,
                device_async_resource_ref mr = mr::get_current_device_resource_ref(),
                gpumem::runtime& rt          = gpumem::cuda_device());
  /// `size` bytes copied from `source` (device or host memory; nullptr only with size 0).
  device_buffer(void const* source, std::size_t size, cuda_stream_view stream,
                device_async_resource_ref mr = mr::get_current_device_resource_ref(),
                gpumem::runtime& rt          = gpumem::cuda_device());
  /// A copy of `other`'s `size()` bytes (its capacity becomes the size), on `stream`.
  device_buffer(device_buffer const& other, cuda_stream_view stream,
                device_async_resource_ref mr = mr::get_current_device_resource_ref(),
                gpumem::runtime& rt          = gpumem::cuda_device());
  device_buffer(device_buffer const&)            = delete;
  device_buffer& operator=(device_buffer const&) = delete;
  device_buffer(device_buffer&& other) noexcept;
  /// Frees this buffer's memory on its stream, then takes `other`'s memory, stream and resource.
  device_buffer& operator=(device_buffer&& other) noexcept;
  /// Frees the memory on the buffer's stream.
  ~device_buffer();

  /// Makes the capacity at least `new_capacity` (contents kept); the stream becomes `stream`.
  void reserve(std::size_t new_capacity, cuda_stream_view stream);
  /// Makes the size `new_size`: within the capacity, nothing is allocated; beyond it, new memory
  /// of exactly `new_size` bytes, with the contents copied. New bytes are uninitialized.
  void resize(std::size_t new_size, cuda_stream_view stream);
  /// Makes the capacity equal to the size (a copy into new memory when they differ).
  void shrink_to_fit(cuda_stream_view stream);

  [[nodiscard]] void const* data() const noexcept { return data_; }
  [[nodiscard]] void* data() noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::int64_t ssize() const noexcept { return static_cast<std::int64_t>(size_); }
  [[nodiscard]] bool is_empty() const noexcept { return size_ == 0; }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] cuda_stream_view stream() const noexcept { return stream_; }
  /// The stream later allocations, copies and the final free use (no synchronization).
  void set_stream(cuda_stream_view stream) noexcept { stream_ = stream; }
  [[nodiscard]] device_async_resource_ref memory_resource() const noexcept { return mr_; }
  [[nodiscard]] gpumem::runtime& runtime() const noexcept { return *rt_; }

 private:
  /// New memory of `capacity` bytes holding the first `keep` bytes of the current contents;
  /// replaces the current memory (freed on the stream). Nothing changes when it throws.
  void reallocate(std::size_t capacity, std::size_t keep);
  void free_memory() noexcept;

  void* data_{};
  std::size_t size_{};      // <= capacity_
  std::size_t capacity_{};  // bytes allocated at data_ (0: data_ is null)
  cuda_stream_view stream_{};
  device_async_resource_ref mr_;
  gpumem::runtime* rt_;
};

}  // namespace gpumem
