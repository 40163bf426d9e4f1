// gpumem/mr/pinned_host_memory_resource.hpp — pinned (page-locked) host memory from cudaHostAlloc,
// accessible from host and device. All members are static; the stream is ignored.
// Throws out_of_memory when CUDA reports exhaustion, bad_alloc for any other failure.
// Stateless and thread-safe; all instances are equal.
#pragma once

#include <gpumem/align.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/resource_ref.hpp>

#include <cstddef>

namespace gpumem::mr {

class pinned_host_memory_resource {
 public:
  static void* allocate(std::size_t bytes, std::size_t alignment = RMM_DEFAULT_HOST_ALIGNMENT);
  static void deallocate(void* ptr, std::size_t bytes,
                         std::size_t alignment = RMM_DEFAULT_HOST_ALIGNMENT) noexcept;

  static void* allocate_async(std::size_t bytes, cuda::stream_ref) { return allocate(bytes); }
  static void* allocate_async(std::size_t bytes, std::size_t alignment, cuda::stream_ref)
  {
    return allocate(bytes, alignment);
  }
  static void deallocate_async(void* ptr, std::size_t bytes, cuda::stream_ref) noexcept
  {
    deallocate(ptr, bytes);
  }
  static void deallocate_async(void* ptr, std::size_t bytes, std::size_t alignment,
                               cuda::stream_ref) noexcept
  {
    deallocate(ptr, bytes, alignment);
  }

  // The names of CCCL 3.1 and newer (synchronous_resource, stream-first resource).
  static void* allocate_sync(std::size_t bytes, std::size_t alignment)
  {
    return allocate(bytes, alignment);
  }
  static void deallocate_sync(void* ptr, std::size_t bytes, std::size_t alignment) noexcept
  {
    deallocate(ptr, bytes, alignment);
  }
  static void* allocate(cuda::stream_ref, std::size_t bytes, std::size_t alignment)
  {
    return allocate(bytes, alignment);
  }
  static void deallocate(cuda::stream_ref, void* ptr, std::size_t bytes,
                         std::size_t alignment) noexcept
  {
    deallocate(ptr, bytes, alignment);
  }

  bool operator==(pinned_host_memory_resource const&) const { return true; }
  bool operator!=(pinned_host_memory_resource const&) const { return false; }

  friend void get_property(pinned_host_memory_resource const&, cuda::mr::device_accessible) noexcept
  {
  }
  friend void get_property(pinned_host_memory_resource const&, cuda::mr::host_accessible) noexcept
  {
  }
};

static_assert(gpumem::detail::async_resource_with<
              pinned_host_memory_resource, cuda::mr::device_accessible, cuda::mr::host_accessible>);

}  // namespace gpumem::mr
