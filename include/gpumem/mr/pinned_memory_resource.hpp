// gpumem/mr/pinned_memory_resource.hpp — a host_memory_resource of pinned host memory
// (cudaMallocHost). It "pretends" to support the async interface: the stream is ignored.
// Device-accessible as well as host-accessible. Thread-safe. Equal to every pinned_memory_resource
// over the same runtime.
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/runtime.hpp>
#include <gpumem/mr/host_memory_resource.hpp>

namespace gpumem::mr {

class pinned_memory_resource final : public host_memory_resource {
 public:
  explicit pinned_memory_resource(gpumem::runtime& rt = gpumem::cuda_device()) noexcept
      : runtime_{&rt}
  {
  }

  void* allocate_async(std::size_t bytes, std::size_t alignment, cuda_stream_view)
  {
    return allocate(bytes, alignment);
  }
  void* allocate_async(std::size_t bytes, cuda_stream_view) { return allocate(bytes); }
  void deallocate_async(void* ptr, std::size_t bytes, std::size_t alignment,
                        cuda_stream_view) noexcept
  {
    deallocate(ptr, bytes, alignment);
  }
  void deallocate_async(void* ptr, std::size_t bytes, cuda_stream_view) noexcept
  {
    deallocate(ptr, bytes);
  }

  // The stream-first names of CCCL 3.1 and newer; the stream is ignored here too.
  using host_memory_resource::allocate;
  using host_memory_resource::deallocate;
  void* allocate(cuda::stream_ref, std::size_t bytes, std::size_t alignment)
  {
    return allocate(bytes, alignment);
  }
  void deallocate(cuda::stream_ref, void* ptr, std::size_t bytes, std::size_t alignment) noexcept
  {
    deallocate(ptr, bytes, alignment);
  }

  [[nodiscard]] gpumem::runtime& get_runtime() const noexcept { return *runtime_; }

  friend void get_property(pinned_memory_resource const&, cuda::mr::device_accessible) noexcept {}

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* ptr, std::size_t bytes, std::size_t alignment) noexcept override;
  [[nodiscard]] bool do_is_equal(host_memory_resource const& other) const noexcept override
  {
    auto const* o = dynamic_cast<pinned_memory_resource const*>(&other);
    return o != nullptr && o->runtime_ == runtime_;
  }

  gpumem::runtime* runtime_;
};

static_assert(gpumem::detail::sync_resource_with<pinned_memory_resource, cuda::mr::host_accessible,
                                                 cuda::mr::device_accessible>);
static_assert(gpumem::detail::async_resource_with<pinned_memory_resource, cuda::mr::host_accessible,
                                                  cuda::mr::device_accessible>);

}  // namespace gpumem::mr
