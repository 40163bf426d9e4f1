#include "kernels.hpp"

#include <cstdint>

namespace gpumem::test {
namespace {

__global__ void spin_then_set(int* flag, long long cycles)
{
  auto const start = clock64();
  while (clock64() - start < cycles) {}
  __threadfence();
  *flag = 1;
}

__global__ void read_flag(int const* flag, int* out)
{
  *out = *flag;
}

__global__ void fill(unsigned char* ptr, std::size_t bytes, unsigned char value)
{
  for (auto i = blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += gridDim.x * blockDim.x) {
    ptr[i] = value;
  }
}

/// Word i of a block filled with `seed`.
__device__ std::uint32_t word(std::size_t i, std::uint32_t seed)
{
  return static_cast<std::uint32_t>(i) * 2654435761U + seed;
}

__global__ void fill_words(std::uint32_t* p, std::size_t n, std::uint32_t seed)
{
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    p[i] = word(i, seed);
  }
}

__global__ void count_wrong(std::uint32_t const* p, std::size_t n, std::uint32_t seed,
                            unsigned long long* wrong)
{
  unsigned long long mine = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    if (p[i] != word(i, seed)) { ++mine; }
  }
  if (mine != 0) { atomicAdd(wrong, mine); }
}

}  // namespace

void launch_fill_words(cudaStream_t stream, void* ptr, std::size_t bytes, std::uint32_t seed)
{
  fill_words<<<1024, 256, 0, stream>>>(static_cast<std::uint32_t*>(ptr), bytes / 4, seed);
}

void launch_count_wrong_words(cudaStream_t stream, void const* ptr, std::size_t bytes,
                              std::uint32_t seed, unsigned long long* wrong)
{
  count_wrong<<<1024, 256, 0, stream>>>(static_cast<std::uint32_t const*>(ptr), bytes / 4, seed,
                                        wrong);
}

void launch_spin_then_set(cudaStream_t stream, int* flag, int ms)
{
  int khz{};
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  spin_then_set<<<1, 1, 0, stream>>>(flag, static_cast<long long>(khz) * ms);
}

void launch_read_flag(cudaStream_t stream, int const* flag, int* out)
{
  read_flag<<<1, 1, 0, stream>>>(flag, out);
}

void launch_fill(cudaStream_t stream, void* ptr, std::size_t bytes, unsigned char value)
{
  fill<<<64, 256, 0, stream>>>(static_cast<unsigned char*>(ptr), bytes, value);
}

}  // namespace gpumem::test
