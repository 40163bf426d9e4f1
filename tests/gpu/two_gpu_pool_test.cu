// Two GPUs: access to a pool of device 0 granted after its allocations exist applies to them, and
// revoking it takes it away; the caching allocator and the per-device resources used from several
// threads on both devices at once. Skips without a GPU, and with a reason on one GPU.
#include <support/backend.hpp>

#include <gpumem/cuda_device_id.hpp>

#include <gpumem/caching_device_allocator.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/pool/memory_pool.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

namespace gpumem {
namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

__global__ void add_one(std::uint32_t* p, std::size_t n)
{
  for (auto i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    p[i] += 1U;
  }
}

#define SKIP_UNLESS_TWO_PEER_GPUS()                                                     \
  do {                                                                                  \
    GPUMEM_SKIP_WITHOUT_GPU();                                                          \
    if (get_num_cuda_devices() < 2) {                                                   \
      GTEST_SKIP() << "needs 2 GPUs; this machine has " << get_num_cuda_devices();      \
    }                                                                                   \
    int can_{};                                                                         \
    ASSERT_EQ(cudaDeviceCanAccessPeer(&can_, 1, 0), cudaSuccess);                       \
    if (can_ == 0) { GTEST_SKIP() << "device 1 has no peer capability with device 0"; } \
  } while (0)

/// On a stream of device 1: copies `bytes` at p to a device-1 buffer and back (a read and a write
/// of p by device 1). Returns the first error.
cudaError_t touch_from_device_1(void* p, std::size_t bytes)
{
  int previous{};
  (void)cudaGetDevice(&previous);
  (void)cudaSetDevice(1);
  void* tmp{};
  cudaStream_t s{};
  auto st = cudaMalloc(&tmp, bytes);
  if (st == cudaSuccess) { st = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); }
  if (st == cudaSuccess) { st = cudaMemcpyAsync(tmp, p, bytes, cudaMemcpyDefault, s); }
  if (st == cudaSuccess) { st = cudaMemcpyAsync(p, tmp, bytes, cudaMemcpyDefault, s); }
  if (st == cudaSuccess) { st = cudaStreamSynchronize(s); }
  if (st != cudaSuccess) { (void)cudaGetLastError(); }
  if (s != nullptr) { (void)cudaStreamDestroy(s); }
  if (tmp != nullptr) { (void)cudaFree(tmp); }
  (void)cudaSetDevice(previous);
  return st;
}

TEST(gpu_two_pool_access, granted_after_allocations_exist_applies_to_them_and_can_be_revoked)
{
  SKIP_UNLESS_TWO_PEER_GPUS();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  memory_pool pool{{.location = pool_location::device(0)}};
  cudaStream_t s0{};
  ASSERT_EQ(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking), cudaSuccess);
  constexpr std::size_t n = 4 * mib / 4;
  auto* p = static_cast<std::uint32_t*>(pool.allocate(4 * mib, s0));  // made before any access
  ASSERT_EQ(cudaMemsetAsync(p, 0, 4 * mib, s0), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s0), cudaSuccess);

  auto const before = touch_from_device_1(p, 4 * mib);
  std::cout << "device 1 before access: " << cudaGetErrorName(before) << "\n";
  EXPECT_NE(before, cudaSuccess) << "device 1 reached the pool before it was given access";

  pool.set_access(cuda_device_id{1}, access_flags::read_write);
  EXPECT_EQ(touch_from_device_1(p, 4 * mib), cudaSuccess) << "the existing allocation is shared";
  {  // a kernel on device 1 writes device 0's memory; device 0 reads it back
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    add_one<<<64, 256>>>(p, n);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    std::vector<std::uint32_t> host(n);
    ASSERT_EQ(cudaMemcpy(host.data(), p, 4 * mib, cudaMemcpyDefault), cudaSuccess);
    EXPECT_EQ(host.front(), 1U);
    EXPECT_EQ(host.back(), 1U);
  }

  pool.set_access(cuda_device_id{1}, access_flags::none);  // revoked
  EXPECT_EQ(pool.access(cuda_device_id{1}), access_flags::none);
  auto const after = touch_from_device_1(p, 4 * mib);
  std::cout << "device 1 after revoking: " << cudaGetErrorName(after) << "\n";
  EXPECT_NE(after, cudaSuccess) << "device 1 still reached the pool after its access was revoked";
  pool.deallocate(p, s0);
  ASSERT_EQ(cudaStreamSynchronize(s0), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(s0), cudaSuccess);
}

TEST(gpu_two_caching, several_threads_on_both_devices)
{
  SKIP_UNLESS_TWO_PEER_GPUS();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  CachingDeviceAllocator alloc;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      int const device = t % 2;
      for (int i = 0; i < 2000; ++i) {
        void* p{};
        std::size_t const bytes = std::size_t{512} << (i % 10);
        if (alloc.DeviceAllocate(device, &p, bytes) != cudaSuccess) {
          failures.fetch_add(1);
          continue;
        }
        cudaPointerAttributes attr{};
        if (cudaPointerGetAttributes(&attr, p) != cudaSuccess || attr.device != device) {
          failures.fetch_add(1);
        }
        if (alloc.DeviceFree(device, p) != cudaSuccess) { failures.fetch_add(1); }
      }
    });
  }
  for (auto& th : threads) { th.join(); }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(alloc.live_blocks.size(), 0U);
  int current{-1};
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0) << "the calling thread's device is unchanged";
  EXPECT_EQ(alloc.FreeAllCached(), cudaSuccess);
}

TEST(gpu_two_per_device, each_device_its_own_resource_from_several_threads)
{
  SKIP_UNLESS_TWO_PEER_GPUS();
  using pool_mr = mr::pool_memory_resource<mr::cuda_memory_resource>;
  mr::cuda_memory_resource cuda;
  std::vector<std::unique_ptr<pool_mr>> pools;
  for (int d = 0; d < 2; ++d) {  // each pool takes its first chunk on the device current now
    ASSERT_EQ(cudaSetDevice(d), cudaSuccess);
    pools.push_back(std::make_unique<pool_mr>(&cuda, 64 * mib));
  }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  auto const old0 = mr::set_per_device_resource(cuda_device_id{0}, pools[0].get());
  auto const old1 = mr::set_per_device_resource(cuda_device_id{1}, pools[1].get());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      int const device = t % 2;
      if (cudaSetDevice(device) != cudaSuccess) { failures.fetch_add(1); }
      auto* mr = mr::get_current_device_resource();
      for (int i = 0; i < 1000; ++i) {
        void* p = mr->allocate(4096 + 256 * (i % 16));
        cudaPointerAttributes attr{};
        if (cudaPointerGetAttributes(&attr, p) != cudaSuccess || attr.device != device) {
          failures.fetch_add(1);
        }
        mr->deallocate(p, 4096 + 256 * (i % 16));
      }
    });
  }
  for (auto& th : threads) { th.join(); }
  EXPECT_EQ(failures.load(), 0);
  (void)mr::set_per_device_resource(cuda_device_id{0}, old0);
  (void)mr::set_per_device_resource(cuda_device_id{1}, old1);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

}  // namespace
}  // namespace gpumem
