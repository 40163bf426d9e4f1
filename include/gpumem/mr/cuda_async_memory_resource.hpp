// gpumem/mr/cuda_async_memory_resource.hpp — device memory from CUDA's stream-ordered allocator
// (cudaMallocFromPoolAsync / cudaFreeAsync) over a memory_pool this resource owns.
//
// Construction (on the current device):
//   initial_pool_size   bytes the pool reserves up front (allocated and freed once);
//                       default: half of the device's free memory;
//   release_threshold   bytes the pool keeps at a synchronization; default: the device's total
//                       memory (the pool does not shrink by itself);
//   export_handle_type  IPC handle type of the pool's allocations; default: none.
// Throws logic_error when the device or driver does not support stream-ordered allocation (or
// the handle type is invalid, e.g. win32 on Linux), cuda_error when CUDA refuses the pool.
// Memory is usable on the allocating stream; freed memory is reused following the pool's reuse
// policies (stream order is kept by CUDA). Thread-safe. Two resources are equal when they use the
// same pool (also a cuda_async_view_memory_resource of that pool).
#pragma once

#include <gpumem/mr/capabilities.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/pool/allocation_handle_type.hpp>
#include <gpumem/pool/memory_pool.hpp>

#include <cstddef>
#include <optional>

namespace gpumem::mr {

class cuda_async_memory_resource final : public device_memory_resource, public trimmable {
 public:
  using allocation_handle_type = gpumem::allocation_handle_type;

  cuda_async_memory_resource(std::optional<std::size_t> initial_pool_size             = {},
                             std::optional<std::size_t> release_threshold             = {},
                             std::optional<allocation_handle_type> export_handle_type = {},
                             gpumem::runtime& rt = gpumem::cuda_device());

  /// The underlying CUDA pool.
  [[nodiscard]] cudaMemPool_t pool_handle() const noexcept { return pool_.handle(); }
  /// The underlying pool (attributes, statistics, access, trim_to, export).
  [[nodiscard]] memory_pool const& pool() const noexcept { return pool_; }
  /// Releases the pool's free memory to the device (pool().trim_to(0)).
  void trim() override { pool_.trim_to(0); }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;

  memory_pool pool_;
};

static_assert(
    gpumem::detail::async_resource_with<cuda_async_memory_resource, cuda::mr::device_accessible>);

}  // namespace gpumem::mr
