// The driver's pointer attributes (cuPointerGetAttributes) behind runtime::pointer_attributes.
// Used only by the CUDA runtime (src/runtime/cuda/cuda_runtime.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace gpumem::detail {

/// As runtime::pointer_attributes; cudaErrorNotSupported when the driver lacks the call.
cudaError_t cuda_pointer_attributes(void const* ptr, cudaMemoryType* type, int* device,
                                    cudaMemPool_t* pool, void const** base,
                                    std::size_t* size) noexcept;

}  // namespace gpumem::detail
