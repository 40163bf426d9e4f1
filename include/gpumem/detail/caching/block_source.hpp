// gpumem/detail/caching/block_source.hpp — where the caching allocator's blocks come from and go
// back to: the runtime (drop-in caching_device_allocator, any device) or an upstream resource
// (caching_memory_resource). Not API.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace gpumem::detail::caching {

class block_source {
 public:
  block_source()                               = default;
  block_source(block_source const&)            = delete;
  block_source& operator=(block_source const&) = delete;
  virtual ~block_source()                      = default;

  /// `bytes` of memory on `device` (the current device), for use on `stream`. Throws
  /// out_of_memory when exhausted, another exception for other failures.
  [[nodiscard]] virtual void* allocate(int device, std::size_t bytes, cudaStream_t stream)  = 0;
  virtual void free(int device, void* ptr, std::size_t bytes, cudaStream_t stream) noexcept = 0;
};

}  // namespace gpumem::detail::caching
