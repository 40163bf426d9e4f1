// gpumem/mr/host_memory_resource.hpp — the base of host memory resources.
// allocate(bytes, alignment) / deallocate(ptr, bytes, alignment) call the private virtuals.
// 0 bytes returns nullptr; deallocating nullptr is a no-op; deallocate never throws: do_deallocate
// may be declared with or without noexcept (RMM's form); if it throws, the error is reported
// on stderr and not propagated. An alignment
// that is not a power of two falls back to alignof(std::max_align_t), as RMM documents, so
// derived classes only see powers of two.
#pragma once

#include <gpumem/align.hpp>
#include <gpumem/detail/aligned_host.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/over_aligned.hpp>
#include <gpumem/error.hpp>
#include <gpumem/resource_ref.hpp>

#include <cstddef>
#include <exception>

namespace gpumem::mr {

class host_memory_resource {
 public:
  host_memory_resource()                                           = default;
  virtual ~host_memory_resource()                                  = default;
  host_memory_resource(host_memory_resource const&)                = default;
  host_memory_resource(host_memory_resource&&) noexcept            = default;
  host_memory_resource& operator=(host_memory_resource const&)     = default;
  host_memory_resource& operator=(host_memory_resource&&) noexcept = default;

  void* allocate(std::size_t bytes, std::size_t alignment = alignof(std::max_align_t))
  {
    return bytes == 0 ? nullptr : do_allocate(bytes, detail::host_alignment(alignment));
  }

  void deallocate(void* ptr, std::size_t bytes,
                  std::size_t alignment = alignof(std::max_align_t)) noexcept
  {
    if (ptr == nullptr) { return; }
    try {
      do_deallocate(ptr, bytes, detail::host_alignment(alignment));
    } catch (std::exception const& e) {
      detail::report_deallocate_failure(ptr, bytes, e.what());
    } catch (...) {
      detail::report_deallocate_failure(ptr, bytes, "unknown exception");
    }
  }

  // The same operations under the names of CCCL 3.1 and newer (cuda::mr::synchronous_resource).
  void* allocate_sync(std::size_t bytes, std::size_t alignment)
  {
    return allocate(bytes, alignment);
  }

  void deallocate_sync(void* ptr, std::size_t bytes, std::size_t alignment) noexcept
  {
    deallocate(ptr, bytes, alignment);
  }

  [[nodiscard]] bool is_equal(host_memory_resource const& other) const noexcept
  {
    return do_is_equal(other);
  }
  [[nodiscard]] bool operator==(host_memory_resource const& other) const noexcept
  {
    return do_is_equal(other);
  }
  [[nodiscard]] bool operator!=(host_memory_resource const& other) const noexcept
  {
    return !do_is_equal(other);
  }

  friend void get_property(host_memory_resource const&, cuda::mr::host_accessible) noexcept {}

 private:
  virtual void* do_allocate(std::size_t bytes, std::size_t alignment) = 0;
  /// Derived classes may declare it noexcept (all of gpumem's do) or not (RMM's form).
  virtual void do_deallocate(void* ptr, std::size_t bytes, std::size_t alignment) = 0;
  [[nodiscard]] virtual bool do_is_equal(host_memory_resource const& other) const noexcept
  {
    return this == &other;
  }
};

static_assert(gpumem::detail::sync_resource_with<host_memory_resource, cuda::mr::host_accessible>);

}  // namespace gpumem::mr
