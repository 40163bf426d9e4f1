// gpumem/pool/pointer_query.hpp — what CUDA knows about a pointer: which device holds it and which
// stream-ordered pool it came from (the driver's pointer attributes).
//
// Use it to pick the device for a peer copy, to check which pool an allocation belongs to before
// sharing it with another process, and when debugging. Querying a pointer after it was freed
// (cudaFreeAsync, cudaFree) is undefined behaviour in CUDA: query live memory.
#pragma once

#include <gpumem/runtime.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>

namespace gpumem::pools {

struct pointer_info {
  cudaMemoryType type{cudaMemoryTypeUnregistered};  ///< unregistered: CUDA does not know it
  int device{-1};        ///< the device whose memory it is (-1: none, e.g. host memory)
  cudaMemPool_t pool{};  ///< the stream-ordered pool it came from; null when none
  void const* base{};    ///< start of the allocation that contains the pointer
  std::size_t size{};    ///< bytes of that allocation
  [[nodiscard]] bool from_pool() const noexcept { return pool != nullptr; }
};

/// What CUDA knows about `ptr` (one cuPointerGetAttributes call; `rt`: the runtime whose memory it
/// is). Host memory CUDA does not know
/// gives type unregistered. Throws cuda_error when the driver refuses the query.
[[nodiscard]] pointer_info query_pointer(void const* ptr,
                                         gpumem::runtime& rt = gpumem::cuda_device());

}  // namespace gpumem::pools

// The earlier spellings: each name is also gpumem::<name> (the same entity).
namespace gpumem {
using pools::pointer_info;
using pools::query_pointer;
}  // namespace gpumem
