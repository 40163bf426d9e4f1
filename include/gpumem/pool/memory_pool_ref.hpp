// gpumem/pool/memory_pool_ref.hpp — a non-owning reference to a CUDA memory pool that this process
// may allocate from (a pool it created, or a device's default or current pool).
//
// Copyable; comparing compares the pool. The referenced pool must outlive the reference.
// Thread safety: every member may be called from any thread (CUDA serializes pool operations).
// Imported pools are a different type (imported_memory_pool) and never convert to this one,
// because CUDA forbids allocating from them.
#pragma once

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/pool/pool_access.hpp>
#include <gpumem/pool/pool_attributes.hpp>
#include <gpumem/pool/pool_location.hpp>

#include <cstddef>
#include <span>

namespace gpumem::pools {

class memory_pool_ref {
 public:
  /// Refers to `pool`, whose memory lives at `location` (used for the peer-capability check of
  /// set_access), a pool of runtime `rt` (the host stand-in in tests). Throws logic_error on a
  /// null handle.
  memory_pool_ref(cudaMemPool_t pool, pool_location location,
                  gpumem::runtime& rt = gpumem::cuda_device());

  [[nodiscard]] cudaMemPool_t handle() const noexcept { return pool_; }
  [[nodiscard]] pool_location location() const noexcept { return location_; }
  /// The runtime the pool belongs to.
  [[nodiscard]] gpumem::runtime& runtime() const noexcept { return *runtime_; }

  /// The value of attribute `A` (pool_attr::*).
  template <pool_attribute A>
  [[nodiscard]] typename A::value_type get() const
  {
    return detail::pool_get<A>(*runtime_, pool_);
  }
  /// Sets a writable attribute; read-only attributes do not compile.
  template <writable_pool_attribute A>
  void set(typename A::value_type value) const
  {
    detail::pool_set<A>(*runtime_, pool_, value);
  }
  /// Resets a high-water mark (to zero, the only value CUDA accepts).
  template <high_water_attribute A>
  void reset_high_water() const
  {
    detail::pool_set_u64(*runtime_, pool_, A::id, 0);
  }
  [[nodiscard]] pool_usage_statistics usage_statistics() const
  {
    return detail::pool_statistics(*runtime_, pool_);
  }
  /// Resets both high-water marks.
  void reset_high_water_marks() const;

  /// Releases memory to the OS until fewer than `min_bytes_to_keep` bytes are reserved, or nothing
  /// more can be released (outstanding or not-yet-synchronized frees stay). IPC pools: CUDA's
  /// programming guide says the driver does not release their physical memory (trimming a no-op,
  /// the release threshold ignored) and that this may change with the driver; driver 580 did
  /// release an IPC pool's memory (docs/pools.md). Rely on neither.
  void trim_to(std::size_t min_bytes_to_keep) const;

  /// Gives `device` access to all of the pool's memory; checks peer capability first.
  void set_access(cuda_device_id device, access_flags flags = access_flags::read_write) const
  {
    detail::set_pool_access(*runtime_, pool_, location_, device, flags);
  }
  [[nodiscard]] access_flags access(cuda_device_id device) const
  {
    return detail::get_pool_access(*runtime_, pool_, device);
  }
  /// Sets several accessors (devices, the host, host NUMA nodes) in one call; all are checked
  /// first, so a refused entry changes nothing.
  void set_access(std::span<access_descriptor const> descriptors) const
  {
    detail::set_pool_access(*runtime_, pool_, location_, descriptors);
  }
  void set_access(pool_location accessor, access_flags flags) const
  {
    access_descriptor const d{accessor, flags};
    detail::set_pool_access(*runtime_, pool_, location_, std::span{&d, 1});
  }
  [[nodiscard]] access_flags access(pool_location accessor) const
  {
    return detail::get_pool_access(*runtime_, pool_, accessor);
  }

  /// `bytes` (> 0) from this pool, ordered on `stream` (cudaMallocFromPoolAsync). Throws
  /// out_of_memory (with the pool's statistics) or cuda_error.
  [[nodiscard]] void* allocate(std::size_t bytes, cuda_stream_view stream) const;
  /// Frees `ptr` on `stream` (cudaFreeAsync). Never throws.
  void deallocate(void* ptr, cuda_stream_view stream) const noexcept;

  /// True when the live allocation `ptr` came from this pool (the driver's pointer attribute;
  /// see pointer_query.hpp). Query only live memory: after a free the answer is undefined.
  [[nodiscard]] bool owns(void const* ptr) const;

  friend bool operator==(memory_pool_ref a, memory_pool_ref b) noexcept
  {
    return a.pool_ == b.pool_;
  }

 protected:
  memory_pool_ref() noexcept = default;  // the empty (moved-from) state of memory_pool
  void reset_to(cudaMemPool_t pool, pool_location location, gpumem::runtime& rt) noexcept
  {
    pool_     = pool;
    location_ = location;
    runtime_  = &rt;
  }

 private:
  cudaMemPool_t pool_{};
  pool_location location_{};
  gpumem::runtime* runtime_{&gpumem::cuda_device()};
};

}  // namespace gpumem::pools

// The earlier spellings: each name is also gpumem::<name> (the same entity).
namespace gpumem {
using pools::memory_pool_ref;
}  // namespace gpumem
