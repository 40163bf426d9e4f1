// device_buffer: see gpumem/device_buffer.hpp.
#include <gpumem/device_buffer.hpp>

#include <gpumem/align.hpp>
#include <gpumem/detail/cccl_compat.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>

#include <utility>

namespace gpumem {
namespace {

void* allocate(device_async_resource_ref mr, std::size_t bytes, cuda_stream_view stream)
{
  return bytes == 0 ? nullptr
                    : detail::async_allocate(mr, bytes, CUDA_ALLOCATION_ALIGNMENT, stream.value());
}

}  // namespace

device_buffer::device_buffer() : device_buffer{0, cuda_stream_view{}} {}

device_buffer::device_buffer(std::size_t size, cuda_stream_view stream,
                             device_async_resource_ref mr, gpumem::runtime& rt)
    : data_{allocate(mr, size, stream)},
      size_{size},
      capacity_{size},
      stream_{stream},
      mr_{mr},
      rt_{&rt}
{
}

device_buffer::device_buffer(void const* source, std::size_t size, cuda_stream_view stream,
                             device_async_resource_ref mr, gpumem::runtime& rt)
    : device_buffer{size, stream, mr, rt}
{
  if (size == 0) { return; }
  if (source == nullptr) {
    free_memory();
    throw logic_error{
        detail::format("device_buffer: copying ", size, " bytes from a null source pointer")};
  }
  try {
    rt_->memcpy_async(data_, source, size, stream_.value());
  } catch (...) {
    free_memory();
    throw;
  }
}

device_buffer::device_buffer(device_buffer const& other, cuda_stream_view stream,
                             device_async_resource_ref mr, gpumem::runtime& rt)
    : device_buffer{other.data(), other.size(), stream, mr, rt}
{
}

device_buffer::device_buffer(device_buffer&& other) noexcept
    : data_{std::exchange(other.data_, nullptr)},
      size_{std::exchange(other.size_, 0)},
      capacity_{std::exchange(other.capacity_, 0)},
      stream_{std::exchange(other.stream_, cuda_stream_view{})},
      mr_{other.mr_},
      rt_{other.rt_}
{
}

device_buffer& device_buffer::operator=(device_buffer&& other) noexcept
{
  if (this != &other) {
    free_memory();
    data_     = std::exchange(other.data_, nullptr);
    size_     = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    stream_   = std::exchange(other.stream_, cuda_stream_view{});
    mr_       = other.mr_;
    rt_       = other.rt_;
  }
  return *this;
}

device_buffer::~device_buffer()
{
  free_memory();
}

void device_buffer::reserve(std::size_t new_capacity, cuda_stream_view stream)
{
  set_stream(stream);
  if (new_capacity > capacity_) { reallocate(new_capacity, size_); }
}

void device_buffer::resize(std::size_t new_size, cuda_stream_view stream)
{
  set_stream(stream);
  if (new_size > capacity_) { reallocate(new_size, size_); }
  size_ = new_size;
}

void device_buffer::shrink_to_fit(cuda_stream_view stream)
{
  set_stream(stream);
  if (size_ != capacity_) { reallocate(size_, size_); }
}

void device_buffer::reallocate(std::size_t capacity, std::size_t keep)
{
  void* fresh = allocate(mr_, capacity, stream_);
  if (keep > 0) {
    try {
      rt_->memcpy_async(fresh, data_, keep, stream_.value());
    } catch (...) {
      detail::async_deallocate(mr_, fresh, capacity, CUDA_ALLOCATION_ALIGNMENT, stream_.value());
      throw;
    }
  }
  free_memory();
  data_     = fresh;
  capacity_ = capacity;
}

void device_buffer::free_memory() noexcept
{
  if (data_ != nullptr) {
    detail::async_deallocate(mr_, data_, capacity_, CUDA_ALLOCATION_ALIGNMENT, stream_.value());
  }
  data_     = nullptr;
  capacity_ = 0;
}

}  // namespace gpumem
