// gpumem/mr/device_memory_resource.hpp — the base of every device memory resource.
//
// Contract: the public non-virtual members call the private virtuals.
//  * allocate(bytes, stream) returns memory usable on `stream`, at least 256-byte aligned; using it
//    on another stream needs synchronization first. Failure throws bad_alloc (out_of_memory when
//    memory is exhausted); a failed call leaves the resource usable.
//  * deallocate(ptr, bytes, stream): `stream` is where the memory may be reused at once; `bytes`
//    must equal the size passed to allocate. Never throws: do_deallocate may be declared with or
//    without noexcept (RMM's form); if it throws, the error is reported on stderr.
//  * allocate(bytes, alignment) and the _async forms accept any power-of-two alignment. Up to 256
//    the request goes straight to do_allocate; above, it is padded and aligned
//    (detail/over_aligned).
//  * A request of 0 bytes returns nullptr without calling do_allocate; deallocating nullptr is a
//    no-op. This holds for every resource, so adaptors and suballocators never see size 0.
//  * is_equal: memory from one can be freed by the other. Default: identity.
//  * Lifetime: an upstream must outlive every resource built over it; a stack holds at most
//    max_stack_depth resources (detail/stack_links.hpp: every build aborts when an upstream is
//    destroyed first; a deeper stack is refused with logic_error).
// Thread safety: as documented by each derived resource.
#pragma once

#include <gpumem/align.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>
#include <gpumem/resource_ref.hpp>

#include <gpumem/detail/over_aligned.hpp>
#include <gpumem/detail/stack_links.hpp>

#include <cstddef>
#include <exception>
#include <type_traits>
#include <utility>

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
    if (ptr == nullptr) { return; }
    try {
      do_deallocate(ptr, bytes, stream);
    } catch (std::exception const& e) {
      detail::report_deallocate_failure(ptr, bytes, e.what());
    } catch (...) {
      detail::report_deallocate_failure(ptr, bytes, "unknown exception");
    }
  }

  /// Allocation on the default stream aligned to `alignment`, a power of two (logic_error
  /// otherwise). Above 256 the resource gives `bytes + alignment - 256` bytes (see design.md).
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
    if (alignment > CUDA_ALLOCATION_ALIGNMENT) [[unlikely]] {
      return bytes == 0 ? nullptr : detail::over_aligned_allocate(*this, bytes, alignment, stream);
    }
    return allocate(align_up(bytes, alignment), stream);
  }

  void* allocate_async(std::size_t bytes, cuda_stream_view stream)
  {
    return allocate(bytes, stream);
  }

  void deallocate_async(void* ptr, std::size_t bytes, std::size_t alignment,
                        cuda_stream_view stream) noexcept
  {
    if (alignment > CUDA_ALLOCATION_ALIGNMENT) [[unlikely]] {
      if (ptr != nullptr) { detail::over_aligned_deallocate(*this, ptr, bytes, alignment, stream); }
      return;
    }
    deallocate(ptr, align_up(bytes, alignment), stream);
  }

  void deallocate_async(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept
  {
    deallocate(ptr, bytes, stream);
  }

  // The same operations under the names of CCCL 3.1 and newer (cuda::mr::synchronous_resource and
  // the stream-first cuda::mr::resource); present whatever CCCL the build uses.
  void* allocate_sync(std::size_t bytes, std::size_t alignment)
  {
    return allocate(bytes, alignment);
  }

  void deallocate_sync(void* ptr, std::size_t bytes, std::size_t alignment) noexcept
  {
    deallocate(ptr, bytes, alignment);
  }

  void* allocate(cuda::stream_ref stream, std::size_t bytes, std::size_t alignment)
  {
    return allocate_async(bytes, alignment, stream);
  }

  void deallocate(cuda::stream_ref stream, void* ptr, std::size_t bytes,
                  std::size_t alignment) noexcept
  {
    deallocate_async(ptr, bytes, alignment, stream);
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

  /// Whether the resource uses non-default streams (a query of the resource interface). Default:
  /// false.
  [[nodiscard]] virtual bool supports_streams() const noexcept { return false; }
  /// Whether get_mem_info reports memory (a query of the resource interface). Default: false.
  [[nodiscard]] virtual bool supports_get_mem_info() const noexcept { return false; }
  /// (free, total) bytes of the resource as seen from `stream`; {0, 0} where unsupported.
  [[nodiscard]] std::pair<std::size_t, std::size_t> get_mem_info(cuda_stream_view stream) const
  {
    return do_get_mem_info(stream);
  }

  friend void get_property(device_memory_resource const&, cuda::mr::device_accessible) noexcept {}

  /// How many resources this one's stack holds: itself and those below it (1 for a leaf, or
  /// for a resource whose upstream was given as a resource ref). At most max_stack_depth.
  [[nodiscard]] std::size_t stack_depth() const noexcept { return node_.depth(); }

  /// Links this resource over `upstream` (ignored unless it is a gpumem device resource): sets the
  /// stack depth, throws logic_error past max_stack_depth, and counts this one as built over
  /// it. The constructors that take the upstream as a pointer call it; code that built
  /// a resource over a resource ref to `upstream` (language bindings) may call it once after.
  template <class Upstream>
  void link_upstream(Upstream* upstream)
  {
    if constexpr (std::is_base_of_v<device_memory_resource, Upstream>) {
      if (upstream != nullptr) {
        link_.link(node_, static_cast<device_memory_resource*>(upstream)->node_);
      }
    }
  }

 private:
  detail::stack_node node_;     // destroyed last: checks that nothing is still built over this
  detail::upstream_link link_;  // destroyed before: this one no longer counts over its upstream

  static void check_alignment(std::size_t bytes, std::size_t alignment)
  {
    GPUMEM_EXPECTS(is_supported_alignment(alignment), logic_error,
                   detail::format("alignment must be a power of two, got ", alignment));
    GPUMEM_EXPECTS(can_align_up(bytes, alignment), out_of_memory,
                   detail::format("cannot allocate ", bytes, " bytes aligned to ", alignment,
                                  ": size overflows"));
  }

  virtual void* do_allocate(std::size_t bytes, cuda_stream_view stream) = 0;
  /// Derived classes may declare it noexcept (all of gpumem's do) or not (RMM's form).
  virtual void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) = 0;
  [[nodiscard]] virtual std::pair<std::size_t, std::size_t> do_get_mem_info(cuda_stream_view) const
  {
    return {0, 0};
  }
  [[nodiscard]] virtual bool do_is_equal(device_memory_resource const& other) const noexcept
  {
    return this == &other;
  }
};

static_assert(detail::async_resource_with<device_memory_resource, cuda::mr::device_accessible>);

}  // namespace gpumem::mr
