// gpumem/mr/new_delete_resource.hpp — host memory from the global aligned operator new / delete.
// Stateless and thread-safe; all instances are equal. Throws std::bad_alloc from operator new.
#pragma once

#include <gpumem/mr/host_memory_resource.hpp>

#include <new>

namespace gpumem::mr {

class new_delete_resource final : public host_memory_resource {
 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override
  {
    GPUMEM_EXPECTS(
        is_supported_alignment(alignment), logic_error,
        detail::format("new_delete_resource: alignment must be a power of two, got ", alignment));
    return ::operator new (bytes, std::align_val_t{alignment});
  }

  void do_deallocate(void* ptr, std::size_t, std::size_t alignment) noexcept override
  {
    ::operator delete (ptr, std::align_val_t{alignment});
  }

  [[nodiscard]] bool do_is_equal(host_memory_resource const& other) const noexcept override
  {
    return dynamic_cast<new_delete_resource const*>(&other) != nullptr;
  }
};

static_assert(gpumem::detail::sync_resource_with<new_delete_resource, cuda::mr::host_accessible>);

}  // namespace gpumem::mr
