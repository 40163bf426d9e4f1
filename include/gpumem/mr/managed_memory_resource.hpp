// gpumem/mr/managed_memory_resource.hpp — unified memory from cudaMallocManaged / cudaFree.
// Host- and device-accessible. Keep requests below the GPU's free memory: oversubscribing managed
// memory can hang a GPU. Two managed_memory_resources over the same runtime are equal.
#pragma once

#include <gpumem/detail/runtime_leaf_resource.hpp>

namespace gpumem::mr {

class managed_memory_resource final
    : public detail::runtime_leaf_resource<gpumem::memory_kind::managed> {
 public:
  explicit managed_memory_resource(gpumem::runtime& rt = gpumem::cuda_device()) noexcept
      : runtime_leaf_resource{rt}
  {
  }

  friend void get_property(managed_memory_resource const&, cuda::mr::host_accessible) noexcept {}

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view) override
  {
    return allocate_from_runtime("managed_memory_resource", bytes);
  }

  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override
  {
    auto const* o = dynamic_cast<managed_memory_resource const*>(&other);
    return o != nullptr && &o->get_runtime() == &get_runtime();
  }
};

static_assert(gpumem::detail::async_resource_with<
              managed_memory_resource, cuda::mr::device_accessible, cuda::mr::host_accessible>);

}  // namespace gpumem::mr
