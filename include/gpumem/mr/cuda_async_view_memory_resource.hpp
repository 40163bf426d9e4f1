// gpumem/mr/cuda_async_view_memory_resource.hpp — a device memory resource over an existing CUDA
// memory pool it does not own: cudaMallocFromPoolAsync / cudaFreeAsync.
//
// The pool must outlive the resource. Copyable. Throws logic_error for a null pool handle.
// Thread-safe. Equal to any cuda_async(_view) resource over the same pool.
#pragma once

#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/pool/memory_pool_ref.hpp>

#include <cstddef>

namespace gpumem::mr {

class cuda_async_view_memory_resource final : public device_memory_resource {
 public:
  /// Views `pool_handle`, recorded on the device the pool belongs to (not the current device):
  /// the only device with read-write access, or the device whose default or current pool it is.
  /// Throws logic_error for a null handle, a host or host NUMA pool (pinned host memory, not a
  /// device's), a pool whose device cannot be told (use the memory_pool_ref constructor), no
  /// current device, or a driver or device without stream-ordered allocation (as the owning
  /// resource does).
  cuda_async_view_memory_resource(cudaMemPool_t pool_handle,
                                  gpumem::runtime& rt = gpumem::cuda_device());
  /// Views `pool`. Throws logic_error when it is empty (a moved-from memory_pool).
  explicit cuda_async_view_memory_resource(memory_pool_ref pool);

  cuda_async_view_memory_resource(cuda_async_view_memory_resource const&)            = default;
  cuda_async_view_memory_resource(cuda_async_view_memory_resource&&)                 = default;
  cuda_async_view_memory_resource& operator=(cuda_async_view_memory_resource const&) = default;
  cuda_async_view_memory_resource& operator=(cuda_async_view_memory_resource&&)      = default;
  ~cuda_async_view_memory_resource() override                                        = default;

  [[nodiscard]] cudaMemPool_t pool_handle() const noexcept { return pool_.handle(); }
  [[nodiscard]] memory_pool_ref pool() const noexcept { return pool_; }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;

  memory_pool_ref pool_;
};

static_assert(gpumem::detail::async_resource_with<cuda_async_view_memory_resource,
                                                  cuda::mr::device_accessible>);

}  // namespace gpumem::mr
