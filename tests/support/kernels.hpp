// tests/support/kernels.hpp — tiny GPU kernels for stream-ordering tests (kernels.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace gpumem::test {

/// Spins for about `ms` milliseconds on `stream`, then sets *flag = 1.
void launch_spin_then_set(cudaStream_t stream, int* flag, int ms);
/// Copies *flag to *out on `stream`.
void launch_read_flag(cudaStream_t stream, int const* flag, int* out);
/// Fills `bytes` bytes at `ptr` with `value` on `stream` (a kernel, not cudaMemset).
void launch_fill(cudaStream_t stream, void* ptr, std::size_t bytes, unsigned char value);
/// Writes the 4-byte words of [ptr, ptr + bytes) with a pattern of `seed` (word i: i * 2654435761
/// + seed) on `stream`.
void launch_fill_words(cudaStream_t stream, void* ptr, std::size_t bytes, std::uint32_t seed);
/// Adds to *wrong (device memory) the words of [ptr, ptr + bytes) that differ from
/// launch_fill_words(ptr, bytes, seed), on `stream`.
void launch_count_wrong_words(cudaStream_t stream, void const* ptr, std::size_t bytes,
                              std::uint32_t seed, unsigned long long* wrong);

}  // namespace gpumem::test
