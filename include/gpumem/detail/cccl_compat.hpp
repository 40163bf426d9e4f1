// gpumem/detail/cccl_compat.hpp — the one place that knows which CCCL memory-resource interface
// the build uses. Everything else names the aliases, concepts and calls below.
//
//  CCCL 3.0 (CUDA 13.0)  resource_ref (synchronous) / async_resource_ref (stream-ordered);
//                        allocate(bytes, alignment), allocate_async(bytes, alignment, stream).
//  CCCL 3.1 and newer    synchronous_resource_ref / resource_ref (stream-ordered);
//                        allocate_sync(bytes, alignment), allocate(stream, bytes, alignment).
//  CCCL 3.2 and newer    also cuda::mr::any_resource and cuda::mr::shared_resource; refs and
//                        any_resource take copyable resources only, so gpumem's ref aliases
//                        name pointer_resource_ref (an any_resource holding a pointer).
//
// gpumem's resources carry both sets of member names, so they satisfy the concepts of every
// version; only references (which are CCCL's types) need the calls below.
#pragma once

#ifndef LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#endif
#include <cuda/memory_resource>
#include <cuda/stream_ref>

#include <cstddef>

#ifndef CCCL_VERSION
#error "gpumem needs CCCL 3.0 or newer (the CUDA 13 toolkit or the nvidia-cuda-cccl headers)"
#endif
#if CCCL_VERSION < 3000000
#error "gpumem needs CCCL 3.0 or newer; this build found an older CCCL"
#endif

/// 1 when the memory-resource interface takes the stream first (CCCL 3.1 and newer).
#define GPUMEM_CCCL_STREAM_FIRST (CCCL_VERSION >= 3001000)
/// 1 when cuda::mr::any_resource and cuda::mr::shared_resource exist (CCCL 3.2 and newer).
#define GPUMEM_CCCL_HAS_ANY_RESOURCE (CCCL_VERSION >= 3002000)

#if GPUMEM_CCCL_HAS_ANY_RESOURCE
#include <gpumem/detail/pointer_resource_ref.hpp>
#endif

namespace gpumem::detail {

#if GPUMEM_CCCL_HAS_ANY_RESOURCE

// cuda::mr::resource_ref takes copyable resources only: refs hold a pointer to the resource.
template <class... Properties>
using sync_resource_ref = pointer_resource_ref<::cuda::mr::any_synchronous_resource<Properties...>>;
template <class... Properties>
using async_resource_ref = pointer_resource_ref<::cuda::mr::any_resource<Properties...>>;

#elif GPUMEM_CCCL_STREAM_FIRST

template <class... Properties>
using sync_resource_ref = ::cuda::mr::synchronous_resource_ref<Properties...>;
template <class... Properties>
using async_resource_ref = ::cuda::mr::resource_ref<Properties...>;

#endif

#if GPUMEM_CCCL_STREAM_FIRST

template <class Resource>
concept async_resource = ::cuda::mr::resource<Resource>;
template <class Resource, class... Properties>
concept sync_resource_with = ::cuda::mr::synchronous_resource_with<Resource, Properties...>;
template <class Resource, class... Properties>
concept async_resource_with = ::cuda::mr::resource_with<Resource, Properties...>;

/// Stream-ordered allocation through a reference (or any stream-ordered resource).
template <class Ref>
void* async_allocate(Ref&& ref, std::size_t bytes, std::size_t alignment, ::cuda::stream_ref stream)
{
  return ref.allocate(stream, bytes, alignment);
}

template <class Ref>
void async_deallocate(Ref&& ref, void* ptr, std::size_t bytes, std::size_t alignment,
                      ::cuda::stream_ref stream) noexcept
{
  ref.deallocate(stream, ptr, bytes, alignment);
}

/// Synchronous allocation through a reference (or any resource).
template <class Ref>
void* sync_allocate(Ref&& ref, std::size_t bytes, std::size_t alignment)
{
  return ref.allocate_sync(bytes, alignment);
}

template <class Ref>
void sync_deallocate(Ref&& ref, void* ptr, std::size_t bytes, std::size_t alignment) noexcept
{
  ref.deallocate_sync(ptr, bytes, alignment);
}

#else

template <class... Properties>
using sync_resource_ref = ::cuda::mr::resource_ref<Properties...>;
template <class... Properties>
using async_resource_ref = ::cuda::mr::async_resource_ref<Properties...>;

template <class Resource>
concept async_resource = ::cuda::mr::async_resource<Resource>;
template <class Resource, class... Properties>
concept sync_resource_with = ::cuda::mr::resource_with<Resource, Properties...>;
template <class Resource, class... Properties>
concept async_resource_with = ::cuda::mr::async_resource_with<Resource, Properties...>;

template <class Ref>
void* async_allocate(Ref&& ref, std::size_t bytes, std::size_t alignment, ::cuda::stream_ref stream)
{
  return ref.allocate_async(bytes, alignment, stream);
}

template <class Ref>
void async_deallocate(Ref&& ref, void* ptr, std::size_t bytes, std::size_t alignment,
                      ::cuda::stream_ref stream) noexcept
{
  ref.deallocate_async(ptr, bytes, alignment, stream);
}

template <class Ref>
void* sync_allocate(Ref&& ref, std::size_t bytes, std::size_t alignment)
{
  return ref.allocate(bytes, alignment);
}

template <class Ref>
void sync_deallocate(Ref&& ref, void* ptr, std::size_t bytes, std::size_t alignment) noexcept
{
  ref.deallocate(ptr, bytes, alignment);
}

#endif

/// CRTP base: Derived has every stateless property (device_accessible, host_accessible, ...) that
/// Upstream has. Stands in for cuda::forward_property, whose CCCL 3.2+ form also forwards the
/// dynamic accessibility property and so needs an upstream_resource() returning Upstream itself;
/// gpumem's adaptors hold their upstream as a resource ref.
template <class Derived, class Upstream>
struct forward_properties {
  // clang-format off
  template <class Property>
    requires(!::cuda::property_with_value<Property> && ::cuda::has_property<Upstream, Property>)
  friend constexpr void get_property(Derived const&, Property) noexcept {}
  // clang-format on
};

}  // namespace gpumem::detail
