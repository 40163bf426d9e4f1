// The virtual-memory pool's peer access on two GPUs: with peer devices given access, a stream of
// device 1 copies into (and out of) pool memory that lives on device 0; without them the driver
// refuses the copy. Skips without a GPU, and with a reason on one GPU.
#include <support/backend.hpp>

#include <gpumem/cuda_device_id.hpp>

#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <iostream>
#include <vector>

namespace gpumem {
namespace {

constexpr std::size_t bytes = std::size_t{8} << 20;

/// Copies `bytes` from a buffer on device 1 into `dst` and back, on a stream of device 1.
/// Returns the first CUDA error, or cudaSuccess with `out` holding what came back.
cudaError_t round_trip_from_device_1(void* dst, std::vector<std::uint32_t>& out)
{
  std::vector<std::uint32_t> in(bytes / 4);
  for (std::size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<std::uint32_t>(i * 2654435761U);
  }
  out.assign(in.size(), 0);
  int previous{};
  (void)cudaGetDevice(&previous);
  (void)cudaSetDevice(1);
  void* src{};
  cudaStream_t s{};
  auto st = cudaMalloc(&src, bytes);
  if (st == cudaSuccess) { st = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); }
  if (st == cudaSuccess) { st = cudaMemcpyAsync(src, in.data(), bytes, cudaMemcpyDefault, s); }
  if (st == cudaSuccess) { st = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s); }
  if (st == cudaSuccess) { st = cudaMemsetAsync(src, 0, bytes, s); }
  if (st == cudaSuccess) { st = cudaMemcpyAsync(src, dst, bytes, cudaMemcpyDefault, s); }
  if (st == cudaSuccess) { st = cudaMemcpyAsync(out.data(), src, bytes, cudaMemcpyDefault, s); }
  if (st == cudaSuccess) { st = cudaStreamSynchronize(s); }
  if (st != cudaSuccess) { (void)cudaGetLastError(); }
  if (s != nullptr) { (void)cudaStreamDestroy(s); }
  if (src != nullptr) { (void)cudaFree(src); }
  (void)cudaSetDevice(previous);
  if (st == cudaSuccess && out != in) { return cudaErrorUnknown; }
  return st;
}

TEST(gpu_vmm_pool_peers, device_1_copies_into_pool_memory_of_device_0)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  if (get_num_cuda_devices() < 2) {
    GTEST_SKIP() << "needs 2 GPUs; this machine has " << get_num_cuda_devices();
  }
  int can{};
  ASSERT_EQ(cudaDeviceCanAccessPeer(&can, 1, 0), cudaSuccess);
  if (can == 0) { GTEST_SKIP() << "device 1 has no peer capability with device 0"; }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  std::vector<std::uint32_t> out;

  mr::vmm_pool_memory_resource own{{.device = 0}};
  void* p       = own.allocate(bytes);
  auto const st = round_trip_from_device_1(p, out);
  std::cout << "without peers: " << cudaGetErrorName(st) << "\n";
  EXPECT_NE(st, cudaSuccess) << "device 1 reached memory it was never given access to";
  own.deallocate(p, bytes);

  mr::vmm_pool_memory_resource shared{{.device = 0, .all_peers = true}};
  ASSERT_EQ(shared.options().all_peers, true);
  void* q = shared.allocate(bytes);
  EXPECT_EQ(round_trip_from_device_1(q, out), cudaSuccess);
  void* r = shared.allocate(64 * bytes);  // memory mapped by a later growth is shared too
  EXPECT_EQ(round_trip_from_device_1(r, out), cudaSuccess);
  shared.deallocate(r, 64 * bytes);
  shared.deallocate(q, bytes);
}

}  // namespace
}  // namespace gpumem
