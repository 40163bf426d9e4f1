// gpumem/mr/cuda_memory_resource.hpp — device memory straight from cudaMalloc / cudaFree.
// Stateless apart from its runtime; every call reaches the runtime (and synchronizes like
// cudaFree). Two cuda_memory_resources over the same runtime are equal.
#pragma once

#include <gpumem/detail/runtime_leaf_resource.hpp>

namespace gpumem::mr {

class cuda_memory_resource final
    : public detail::runtime_leaf_resource<gpumem::memory_kind::device> {
 public:
  explicit cuda_memory_resource(gpumem::runtime& rt = gpumem::cuda_device()) noexcept
      : runtime_leaf_resource{rt}
  {
  }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view) override
  {
    return allocate_from_runtime("cuda_memory_resource", bytes);
  }

  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override
  {
    auto const* o = dynamic_cast<cuda_memory_resource const*>(&other);
    return o != nullptr && &o->get_runtime() == &get_runtime();
  }
};

static_assert(
    gpumem::detail::async_resource_with<cuda_memory_resource, cuda::mr::device_accessible>);

}  // namespace gpumem::mr
