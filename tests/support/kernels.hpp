// tests/support/kernels.hpp — tiny GPU kernels for stream-ordering tests (kernels.cu).
#pragma once

#include <cuda_runtime_api.h>

namespace gpumem::test {

/// Spins for about `ms` milliseconds on `stream`, then sets *flag = 1.
void launch_spin_then_set(cudaStream_t stream, int* flag, int ms);
/// Copies *flag to *out on `stream`.
void launch_read_flag(cudaStream_t stream, int const* flag, int* out);
/// Fills `bytes` bytes at `ptr` with `value` on `stream` (a kernel, not cudaMemset).
void launch_fill(cudaStream_t stream, void* ptr, std::size_t bytes, unsigned char value);

}  // namespace gpumem::test
