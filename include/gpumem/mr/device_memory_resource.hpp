// gpumem/mr/device_memory_resource.hpp — the base of every device memory resource.
//
// Contract (seed 000): the public non-virtual members call the private virtuals.
//  * allocate(bytes, stream) returns memory usable on `stream`, at least 256-byte aligned; using it
//    on another stream needs synchronization first. Failure throws bad_alloc (out_of_memory when
//    memory is exhausted); a failed call leaves the resource usable.
//  * deallocate(ptr, bytes, stream): `stream` is where the memory may be reused at once; `bytes`
//    must equal the size passed to allocate. Never throws.
//  * A request of 0 bytes returns nullptr without calling do_allocate; deallocating nullptr is a
//    no-op. This holds for every resource, so adaptors and suballocators never see size 0.
//  * is_equal: memory from one can be freed by the other. Default: identity.
// Thread safety: as documented by each derived resource.
#pragma once

#include <gpumem/align.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>
#include <gpumem/resource_ref.hpp>

#include <cstddef>

namespace gpumem::mr {

class device_memory_resource {
 public:
  device_memory_resource()                                             = default;
  virtual ~device_memory_resource()                                    = default;
  device_memory_resource(device_memory_resource const&)                = default;
  device_memory_resource(device_memory_resource&&) noexcept            = default;
  device_memory_resource& operator=(device_memory_resource const&)     = default;
  device_memory_resource& operator=(device_memory_resource&&) noexcept = default;

  void* allocate(std::size_t bytes, cuda_stream_view stream = cuda_stream_view{})
  {
    return bytes == 0 ? nullptr : do_allocate(bytes, stream);
  }

  void deallocate(void* ptr, std::size_t bytes,
                  cuda_stream_view stream = cuda_stream_view{}) noexcept
  {
    if (ptr != nullptr) { do_deallocate(ptr, bytes, stream); }
  }

  /// Synchronous-interface allocation on the default stream. `alignment` must be a power of two
  /// no larger than 256 (use aligned_resource_adaptor for more); logic_error otherwise.
  void* allocate(std::size_t bytes, std::size_t alignment)
  {
    return allocate_async(bytes, alignment, cuda_stream_view{});
  }

  void deallocate(void* ptr, std::size_t bytes, std::size_t alignment) noexcept
  {
    deallocate_async(ptr, bytes, alignment, cuda_stream_view{});
  }

  void* allocate_async(std::size_t bytes, std::size_t alignment, cuda_stream_view stream)
  {
    check_alignment(bytes, alignment);
    return allocate(align_up(bytes, alignment), stream);
  }

  void* allocate_async(std::size_t bytes, cuda_stream_view stream)
  {
    return allocate(bytes, stream);
  }

  void deallocate_async(void* ptr, std::size_t bytes, std::size_t alignment,
                        cuda_stream_view stream) noexcept
  {
    deallocate(ptr, align_up(bytes, alignment), stream);
  }

  void deallocate_async(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept
  {
    deallocate(ptr, bytes, stream);
  }

  [[nodiscard]] bool is_equal(device_memory_resource const& other) const noexcept
  {
    return do_is_equal(other);
  }

  [[nodiscard]] bool operator==(device_memory_resource const& other) const noexcept
  {
    return do_is_equal(other);
  }

  [[nodiscard]] bool operator!=(device_memory_resource const& other) const noexcept
  {
    return !do_is_equal(other);
  }

  friend void get_property(device_memory_resource const&, cuda::mr::device_accessible) noexcept {}

 private:
  static void check_alignment(std::size_t bytes, std::size_t alignment)
  {
    GPUMEM_EXPECTS(
        is_supported_alignment(alignment) && alignment <= CUDA_ALLOCATION_ALIGNMENT, logic_error,
        detail::format("alignment must be a power of two no larger than 256, got ", alignment));
    GPUMEM_EXPECTS(can_align_up(bytes, alignment), out_of_memory,
                   detail::format("cannot allocate ", bytes, " bytes: size overflows alignment"));
  }

  virtual void* do_allocate(std::size_t bytes, cuda_stream_view stream)                      = 0;
  virtual void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept = 0;
  [[nodiscard]] virtual bool do_is_equal(device_memory_resource const& other) const noexcept
  {
    return this == &other;
  }
};

static_assert(cuda::mr::async_resource_with<device_memory_resource, cuda::mr::device_accessible>);

}  // namespace gpumem::mr
