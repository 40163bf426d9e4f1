// gpumem/mr/polymorphic_allocator.hpp — a stream-ordered typed allocator over a resource ref.
//
// Like std::pmr::polymorphic_allocator: containers of one static allocator type behave
// differently depending on the resource behind the ref. Unlike STL allocators, allocate and
// deallocate take a stream; wrap it in stream_allocator_adaptor for interfaces that want the
// standard Allocator interface. Default-constructed, it uses get_current_device_resource_ref().
// Two allocators compare equal when their resources do (memory of one can be freed by the other).
//
// Thread safety: that of the resource. Throws: out_of_memory when num * sizeof(T) overflows;
// whatever the resource throws.
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/mr/stream_allocator_adaptor.hpp>
#include <gpumem/resource_ref.hpp>

#include <cstddef>
#include <limits>

namespace gpumem::mr {

template <typename T>
class polymorphic_allocator {
 public:
  using value_type = T;

  /// Uses the current device's resource (get_current_device_resource_ref()).
  polymorphic_allocator() = default;

  /// Uses `mr` (implicit: a resource ref converts to an allocator).
  polymorphic_allocator(device_async_resource_ref mr) : mr_{mr} {}  // NOLINT

  template <typename U>
  polymorphic_allocator(polymorphic_allocator<U> const& other) noexcept  // NOLINT
      : mr_{other.get_upstream_resource()}
  {
  }

  /// Storage for `num` objects of T, usable on `stream`.
  [[nodiscard]] value_type* allocate(std::size_t num, cuda_stream_view stream)
  {
    return static_cast<value_type*>(
        gpumem::detail::async_allocate(mr_, bytes_for(num), alignof(T), stream));
  }

  /// Frees storage from allocate(num, ...) of an allocator equal to this one.
  void deallocate(value_type* ptr, std::size_t num, cuda_stream_view stream) noexcept
  {
    gpumem::detail::async_deallocate(mr_, ptr, num * sizeof(T), alignof(T), stream);
  }

  [[nodiscard]] device_async_resource_ref get_upstream_resource() const noexcept { return mr_; }

 private:
  static std::size_t bytes_for(std::size_t num)
  {
    GPUMEM_EXPECTS(num <= std::numeric_limits<std::size_t>::max() / sizeof(T), out_of_memory,
                   detail::format("polymorphic_allocator: cannot allocate ", num, " objects of ",
                                  sizeof(T), " bytes: size overflows"));
    return num * sizeof(T);
  }

  device_async_resource_ref mr_{get_current_device_resource_ref()};
};

template <typename T, typename U>
bool operator==(polymorphic_allocator<T> const& lhs, polymorphic_allocator<U> const& rhs)
{
  return lhs.get_upstream_resource() == rhs.get_upstream_resource();
}

template <typename T, typename U>
bool operator!=(polymorphic_allocator<T> const& lhs, polymorphic_allocator<U> const& rhs)
{
  return !(lhs == rhs);
}

}  // namespace gpumem::mr
