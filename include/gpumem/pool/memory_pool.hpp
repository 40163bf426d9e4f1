// gpumem/pool/memory_pool.hpp — an owning, move-only CUDA memory pool.
//
// Created from pool_properties: the properties are validated first (pool_properties.hpp rules
// R1-R9, logic_error naming the rule, no CUDA call), then the device's capabilities are checked
// (pools supported, requested handle types supported, host pools, managed access, driver version;
// cuda_error(cudaErrorNotSupported) saying which), then cudaMemPoolCreate is called; if CUDA still
// refuses, the cuda_error carries the same diagnosis.
//
// A memory_pool is a memory_pool_ref (all attribute, access, trim and allocation members) that also
// owns the pool: the destructor destroys it (CUDA defers the release until outstanding allocations
// are freed; if the pool is a device's current pool, the device's default pool becomes current).
// Moved-from pools are empty; using one throws logic_error.
#pragma once

#include <gpumem/pool/memory_pool_ref.hpp>
#include <gpumem/pool/pool_properties.hpp>
#include <gpumem/pool/shareable_pool_handle.hpp>

#include <atomic>

namespace gpumem::pools {

class memory_pool : public memory_pool_ref {
 public:
  /// Creates a pool; see the file comment for what is checked and thrown.
  /// `rt`: the runtime that makes the pool (the host stand-in models pools for tests).
  explicit memory_pool(pool_properties const& props, gpumem::runtime& rt = gpumem::cuda_device());
  [[nodiscard]] static memory_pool create(pool_properties const& props,
                                          gpumem::runtime& rt = gpumem::cuda_device())
  {
    return memory_pool{props, rt};
  }

  memory_pool(memory_pool&& other) noexcept;
  memory_pool& operator=(memory_pool&& other) noexcept;
  memory_pool(memory_pool const&)            = delete;
  memory_pool& operator=(memory_pool const&) = delete;
  ~memory_pool();

  [[nodiscard]] pool_properties const& properties() const noexcept { return props_; }
  [[nodiscard]] memory_pool_ref ref() const noexcept { return *this; }

  /// True once export_handle() succeeded (IPC phase 1: share the pool before its allocations).
  [[nodiscard]] bool exported() const noexcept { return exported_.load(); }

  /// Exports the pool as an OS handle of `type`, which must be one of properties().handle_types
  /// (logic_error otherwise, before CUDA is called). The handle owns its descriptor.
  [[nodiscard]] shareable_pool_handle export_handle(
      allocation_handle_type type = allocation_handle_type::posix_file_descriptor) const;

 private:
  void destroy() noexcept;

  pool_properties props_;
  mutable std::atomic<bool> exported_{false};
};

}  // namespace gpumem::pools

// The earlier spellings: each name is also gpumem::<name> (the same entity).
namespace gpumem {
using pools::memory_pool;
}  // namespace gpumem
