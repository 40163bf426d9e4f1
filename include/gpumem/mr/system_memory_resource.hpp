// gpumem/mr/system_memory_resource.hpp — system-allocated memory (malloc) that the GPU reaches
// through HMM or ATS. The constructor throws logic_error when the current device cannot access
// pageable memory. deallocate synchronizes the stream first (the GPU may still use the memory).
// Two system_memory_resources are equal.
#pragma once

#include <gpumem/runtime.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

namespace gpumem::mr {

class system_memory_resource final : public device_memory_resource {
 public:
  explicit system_memory_resource(gpumem::runtime& rt = gpumem::cuda_device());

  [[nodiscard]] gpumem::runtime& get_runtime() const noexcept { return *runtime_; }

  friend void get_property(system_memory_resource const&, cuda::mr::host_accessible) noexcept {}

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;

  gpumem::runtime* runtime_;
};

/// True when `device` can access system-allocated (pageable) memory.
[[nodiscard]] bool is_system_memory_supported(gpumem::runtime& rt, int device);

static_assert(gpumem::detail::async_resource_with<
              system_memory_resource, cuda::mr::device_accessible, cuda::mr::host_accessible>);

}  // namespace gpumem::mr
