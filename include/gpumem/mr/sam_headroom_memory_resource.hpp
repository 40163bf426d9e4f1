// gpumem/mr/sam_headroom_memory_resource.hpp — system memory with GPU headroom kept free.
//
// Memory comes from a system_memory_resource. The part of each allocation that fits in the GPU's
// free memory minus `headroom` gets the GPU as preferred location; the rest prefers the host, so
// that other CUDA calls keep `headroom` bytes. The check queries free memory on every allocation;
// put a binning or pool resource in front for small sizes.
#pragma once

#include <gpumem/mr/system_memory_resource.hpp>

namespace gpumem::mr {

class sam_headroom_memory_resource final : public device_memory_resource {
 public:
  explicit sam_headroom_memory_resource(std::size_t headroom,
                                        gpumem::runtime& rt = gpumem::cuda_device());

  [[nodiscard]] std::size_t get_headroom() const noexcept { return headroom_; }

  friend void get_property(sam_headroom_memory_resource const&, cuda::mr::host_accessible) noexcept
  {
  }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;

  system_memory_resource system_;
  std::size_t headroom_;
};

static_assert(
    gpumem::detail::async_resource_with<sam_headroom_memory_resource, cuda::mr::device_accessible,
                                        cuda::mr::host_accessible>);

}  // namespace gpumem::mr
