// gpumem/mr/prefetch_resource_adaptor.hpp — prefetches every allocation to the current device.
//
// After the upstream allocates, the adaptor asks the runtime to migrate the memory to the current
// device on the allocation's stream (cudaMemPrefetchAsync with a device location), so the first
// kernel on that stream does not fault pages in. Meant for managed (unified) memory; memory the
// runtime cannot prefetch (plain device memory: cudaErrorInvalidValue) is returned unprefetched.
// The prefetch is the one runtime call this adaptor makes on its allocate path; it is its purpose.
//
// Thread safety: thread-safe if the upstream is.
// Throws: logic_error for a null upstream pointer; whatever the upstream throws; cuda_error when
// the prefetch fails for another reason (the allocation is freed first).
#pragma once

#include <gpumem/runtime.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/resource_ref.hpp>

#include <cstddef>

namespace gpumem::mr {

template <typename Upstream>
class prefetch_resource_adaptor
    : public device_memory_resource,
      public gpumem::detail::forward_properties<prefetch_resource_adaptor<Upstream>, Upstream> {
 public:
  /// `rt` is where prefetches go (default: the CUDA runtime; tests pass a host_runtime).
  prefetch_resource_adaptor(device_async_resource_ref upstream,
                            gpumem::runtime& rt = gpumem::cuda_device())
      : upstream_{upstream}, runtime_{&rt}
  {
  }

  /// Throws logic_error when `upstream` is null.
  prefetch_resource_adaptor(Upstream* upstream, gpumem::runtime& rt = gpumem::cuda_device())
      : prefetch_resource_adaptor{to_device_async_resource_ref_checked(upstream), rt}
  {
    this->link_upstream(upstream);
  }

  prefetch_resource_adaptor(prefetch_resource_adaptor&&) noexcept            = default;
  prefetch_resource_adaptor& operator=(prefetch_resource_adaptor&&) noexcept = default;
  prefetch_resource_adaptor(prefetch_resource_adaptor const&)                = delete;
  prefetch_resource_adaptor& operator=(prefetch_resource_adaptor const&)     = delete;
  ~prefetch_resource_adaptor() override                                      = default;

  [[nodiscard]] device_async_resource_ref get_upstream_resource() const noexcept
  {
    return upstream_;
  }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    void* ptr = gpumem::detail::async_allocate(upstream_, bytes, CUDA_ALLOCATION_ALIGNMENT, stream);
    try {
      prefetch(ptr, bytes, stream);
    } catch (...) {
      gpumem::detail::async_deallocate(upstream_, ptr, bytes, CUDA_ALLOCATION_ALIGNMENT, stream);
      throw;
    }
    return ptr;
  }

  void prefetch(void* ptr, std::size_t bytes, cuda_stream_view stream)
  {
    try {
      runtime_->prefetch(ptr, bytes, gpumem::mem_location{runtime_->current_device()},
                         stream.value());
    } catch (cuda_error const& e) {
      if (e.status() != cudaErrorInvalidValue) { throw; }  // not managed memory: nothing to move
    }
  }

  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    gpumem::detail::async_deallocate(upstream_, ptr, bytes, CUDA_ALLOCATION_ALIGNMENT, stream);
  }

  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override
  {
    if (this == &other) { return true; }
    auto const* o = dynamic_cast<prefetch_resource_adaptor const*>(&other);
    return o != nullptr && o->upstream_ == upstream_;
  }

  device_async_resource_ref upstream_;
  gpumem::runtime* runtime_;
};

static_assert(gpumem::detail::async_resource_with<prefetch_resource_adaptor<device_memory_resource>,
                                                  cuda::mr::device_accessible>);

}  // namespace gpumem::mr
