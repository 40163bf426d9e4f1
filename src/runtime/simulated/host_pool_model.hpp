// The host stand-in's model of CUDA memory pools (src/detail only): what the stream-ordered
// allocator documents — pool properties and attributes, usage statistics and their high
// marks, the release threshold applied at synchronizations, trimming, the three reuse policies,
// access by location, default and current pools per device, and export/import of pools and
// pointers within one process — so that the pool API runs in CI without a GPU.
//
// Memory: each allocation takes a segment of the pool (its request rounded up to the pool
// granularity, 2 MiB); a freed segment stays reserved by the pool and is reused whole by a request
// that fits, when the reuse rules allow; trimming and the release threshold give back segments
// whose frees have completed. Segments come from the host runtime's device memory.
//
// Every member is called with the host runtime's lock held. Errors are CUDA's statuses; nothing
// throws except std::bad_alloc.
#pragma once

#include "host_streams.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

namespace gpumem::detail::host_model {

class host_pool_model {
 public:
  static constexpr std::size_t granularity = std::size_t{2} << 20;

  struct hooks {
    std::function<void*(std::size_t)> take_memory;  ///< device memory, or null when exhausted
    std::function<void(void*, std::size_t)> give_memory;
    std::function<stream_rec&(cudaStream_t)> resolve;  ///< throws logic_error for a bad stream
    int device_count{1};
  };

  explicit host_pool_model(hooks h);
  ~host_pool_model();
  host_pool_model(host_pool_model const&)            = delete;
  host_pool_model& operator=(host_pool_model const&) = delete;

  cudaError_t create(cudaMemPool_t* pool, cudaMemPoolProps const* props);
  cudaError_t destroy(cudaMemPool_t pool);
  cudaError_t set_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void const* value);
  cudaError_t get_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
  cudaError_t set_access(cudaMemPool_t pool, cudaMemAccessDesc const* list, std::size_t count);
  cudaError_t get_access(cudaMemAccessFlags* flags, cudaMemPool_t pool,
                         cudaMemLocation const* location);
  cudaError_t trim_to(cudaMemPool_t pool, std::size_t keep);
  cudaError_t allocate(void** ptr, std::size_t bytes, cudaMemPool_t pool, cudaStream_t stream);
  /// cudaFreeAsync of pool memory. cudaErrorInvalidValue when no pool of this model owns `ptr`.
  cudaError_t free_async(void* ptr, cudaStream_t stream);
  /// cudaFree of pool memory (the caller synchronized): freed and reusable at once.
  cudaError_t free_now(void* ptr);
  [[nodiscard]] bool owns(void const* ptr) const;
  /// Device memory the pools reserve (what take_memory gave them and they have not given back).
  [[nodiscard]] std::size_t reserved_bytes() const noexcept;
  /// Pools created (or imported) and not yet dropped; the devices' default pools do not count.
  [[nodiscard]] std::size_t created_pools() const noexcept
  {
    return pools_.size() - defaults_.size();
  }
  cudaError_t default_pool(cudaMemPool_t* pool, int device);
  cudaError_t current_pool(cudaMemPool_t* pool, int device);
  cudaError_t set_current_pool(int device, cudaMemPool_t pool);
  cudaError_t export_pool(void* handle, cudaMemPool_t pool, cudaMemAllocationHandleType type);
  cudaError_t import_pool(cudaMemPool_t* pool, void* handle, cudaMemAllocationHandleType type);
  cudaError_t export_pointer(cudaMemPoolPtrExportData* data, void* ptr);
  cudaError_t import_pointer(void** ptr, cudaMemPool_t pool, cudaMemPoolPtrExportData const* data);
  /// Pool memory's attributes; false when no pool owns `ptr`.
  bool attributes(void const* ptr, cudaMemoryType* type, int* device, cudaMemPool_t* pool,
                  void const** base, std::size_t* size) const;
  /// A stream, event or device synchronization happened: each pool gives back completed free
  /// memory above its release threshold.
  void synchronized();

 private:
  struct pool_rec;
  pool_rec* find(cudaMemPool_t pool) const;
  pool_rec* owner_of(void const* ptr) const;
  void release(pool_rec& p, std::size_t keep);
  void drop(pool_rec& p);  ///< forgets the pool, giving back all its memory
  cudaError_t new_segment(pool_rec& p, std::size_t size, void** ptr);
  /// Frees a live block (or an importer's mapping of it); `freed_on` null: complete at once.
  cudaError_t free_block(void* ptr, stream_rec* freed_on);

  hooks hooks_;
  std::map<cudaMemPool_t, std::unique_ptr<pool_rec>> pools_;
  std::map<int, cudaMemPool_t> defaults_;
  std::map<int, cudaMemPool_t> current_;
  std::map<std::uintptr_t, pool_rec*> exported_fds_;  ///< key: the descriptor's inode
};

}  // namespace gpumem::detail::host_model
