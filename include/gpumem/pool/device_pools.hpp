// gpumem/pool/device_pools.hpp — the default and the current pool of a device.
//
// The default pool exists for every device that supports pools; the current pool is what
// cudaMallocAsync without a pool uses (the default pool until set_current_pool). The default pool
// is not IPC-capable. Imported pools cannot be made current (they do not convert to
// memory_pool_ref).
#pragma once

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/pool/memory_pool_ref.hpp>

namespace gpumem::pools {

/// The default pool of `device` (cuda_error if pools are unsupported).
[[nodiscard]] memory_pool_ref default_pool(cuda_device_id device,
                                           gpumem::runtime& rt = gpumem::cuda_device());
/// The current pool of `device`.
[[nodiscard]] memory_pool_ref current_pool(cuda_device_id device,
                                           gpumem::runtime& rt = gpumem::cuda_device());
/// Makes `pool` the current pool of `device`. logic_error if the pool's memory is on another
/// device (CUDA requires a pool of that device).
void set_current_pool(cuda_device_id device, memory_pool_ref pool);

/// Makes `pool` current for `device` and restores the previous current pool on destruction.
/// Not copyable or movable; the pool must outlive the guard.
class scoped_current_pool {
 public:
  scoped_current_pool(cuda_device_id device, memory_pool_ref pool);
  ~scoped_current_pool();
  scoped_current_pool(scoped_current_pool const&)            = delete;
  scoped_current_pool& operator=(scoped_current_pool const&) = delete;

  [[nodiscard]] memory_pool_ref previous() const noexcept { return previous_; }

 private:
  cuda_device_id device_;
  memory_pool_ref previous_;
};

}  // namespace gpumem::pools

// The earlier spellings: each name is also gpumem::<name> (the same entity).
namespace gpumem {
using pools::current_pool;
using pools::default_pool;
using pools::scoped_current_pool;
using pools::set_current_pool;
}  // namespace gpumem
