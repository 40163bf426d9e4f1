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

}  // namespace

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
