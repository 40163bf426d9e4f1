// arena_memory_resource and the caching allocator on a real GPU: memory freed behind a spinning
// kernel is not handed to another stream before the kernel ends; data written through the
// resources lands where it should (for compute-sanitizer memcheck runs); the arena's default size.
#include <support/backend.hpp>
#include <support/kernels.hpp>

#include <gpumem/caching_device_allocator.hpp>
#include <gpumem/mr/arena_memory_resource.hpp>
#include <gpumem/mr/caching_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <vector>

namespace gpumem::test {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr int spin_ms     = 200;

/// Two non-blocking streams, a device flag set at the end of a spinning kernel, a pinned result.
class gpu_ordering : public ::testing::Test {
 protected:
  void SetUp() override
  {
    GPUMEM_SKIP_WITHOUT_GPU();
    ASSERT_EQ(cudaStreamCreateWithFlags(&s1_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&s2_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&flag_), sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&out_), sizeof(int)), cudaSuccess);
  }
  void TearDown() override
  {
    if (!gpu_available()) { return; }
    (void)cudaDeviceSynchronize();
    (void)cudaStreamDestroy(s1_);
    (void)cudaStreamDestroy(s2_);
    (void)cudaFree(flag_);
    (void)cudaFreeHost(out_);
  }
  /// s1 works for spin_ms, then sets the flag.
  void hold_s1()
  {
    ASSERT_EQ(cudaMemsetAsync(flag_, 0, sizeof(int), s1_), cudaSuccess);
    launch_spin_then_set(s1_, flag_, spin_ms);
  }
  /// True when work enqueued on s2 now runs after s1's held work.
  bool s2_ordered_after_s1()
  {
    launch_read_flag(s2_, flag_, out_);
    EXPECT_EQ(cudaStreamSynchronize(s2_), cudaSuccess);
    return *out_ == 1;
  }

  cudaStream_t s1_{};
  cudaStream_t s2_{};
  int* flag_{};
  int* out_{};
};

TEST_F(gpu_ordering, ArenaLargeBlockFreedBehindAKernelWaitsOnTheOtherStream)
{
  mr::cuda_memory_resource up;
  mr::arena_memory_resource<mr::cuda_memory_resource> mr{&up, 256 * MiB};
  void* p = mr.allocate(8 * MiB, s1_);
  hold_s1();
  mr.deallocate(p, 8 * MiB, s1_);
  void* q = mr.allocate(8 * MiB, s2_);
  EXPECT_EQ(q, p);  // first fit hands the same range back...
  EXPECT_TRUE(s2_ordered_after_s1()) << "...but only after s1's kernel";
  mr.deallocate(q, 8 * MiB, s2_);
  mr.check_invariants();
}

TEST_F(gpu_ordering, ArenaSuperblockReleasedBehindAKernelWaitsOnTheOtherStream)
{
  mr::cuda_memory_resource up;
  mr::arena_memory_resource<mr::cuda_memory_resource> mr{&up, 256 * MiB};
  void* a = mr.allocate(MiB, s1_);
  void* b = mr.allocate(MiB, s1_);
  launch_fill(s1_, b, MiB, 0x11);
  hold_s1();
  mr.deallocate(a, MiB, s1_);
  mr.deallocate(b, MiB, s1_);  // a second empty superblock: back to the global arena
  void* c = mr.allocate(4096, s2_);
  EXPECT_EQ(c, b);
  EXPECT_TRUE(s2_ordered_after_s1());
  mr.deallocate(c, 4096, s2_);
  mr.check_invariants();
}

TEST_F(gpu_ordering, CachingBlockReachesAnotherStreamOnlyAfterItsWorkCompleted)
{
  CachingDeviceAllocator alloc;
  void* p{};
  ASSERT_EQ(alloc.DeviceAllocate(&p, 100000, s1_), cudaSuccess);
  hold_s1();
  ASSERT_EQ(alloc.DeviceFree(p), cudaSuccess);
  void* q{};
  ASSERT_EQ(alloc.DeviceAllocate(&q, 100000, s2_), cudaSuccess);
  if (q == p) { EXPECT_TRUE(s2_ordered_after_s1()); }
  EXPECT_NE(q, p) << "the kernel runs for " << spin_ms << " ms; the block should still be busy";
  ASSERT_EQ(cudaStreamSynchronize(s1_), cudaSuccess);
  void* r{};
  ASSERT_EQ(alloc.DeviceAllocate(&r, 100000, s2_), cudaSuccess);
  EXPECT_EQ(r, p);  // s1 is done: reusable on s2
  ASSERT_EQ(alloc.DeviceFree(q), cudaSuccess);
  ASSERT_EQ(alloc.DeviceFree(r), cudaSuccess);
  alloc.check_invariants();
}

TEST_F(gpu_ordering, CachingResourceFreedBehindAKernelIsNotReusedEarly)
{
  mr::cuda_memory_resource up;
  mr::caching_memory_resource mr{&up};
  for (std::size_t n : {std::size_t{256}, std::size_t{64} << 10, std::size_t{3} << 20}) {
    void* p = mr.allocate(n, s1_);
    hold_s1();
    mr.deallocate(p, n, s1_);
    void* q = mr.allocate(n, s2_);
    if (q == p) { EXPECT_TRUE(s2_ordered_after_s1()) << n; }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    mr.deallocate(q, n, s2_);
  }
  mr.check_invariants();
}

TEST(gpu_arena, DefaultSizeIsHalfTheFreeMemoryAndDataLandsInPlace)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  mr::cuda_memory_resource up;
  std::size_t free{};
  std::size_t total{};
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  mr::arena_memory_resource<mr::cuda_memory_resource> mr{&up};
  EXPECT_NEAR(static_cast<double>(mr.arena_size()), static_cast<double>(free) / 2, 64.0 * MiB);
  std::vector<std::pair<void*, std::size_t>> blocks;
  for (std::size_t n = 256; n <= 64 * MiB; n *= 4) {
    blocks.emplace_back(mr.allocate(n), n);
    launch_fill(cudaStream_t{}, blocks.back().first, n, static_cast<unsigned char>(n % 251));
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (auto [p, n] : blocks) {
    unsigned char first{};
    unsigned char last{};
    auto* c = static_cast<unsigned char*>(p);
    ASSERT_EQ(cudaMemcpy(&first, c, 1, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(&last, c + n - 1, 1, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(first, static_cast<unsigned char>(n % 251));
    EXPECT_EQ(last, static_cast<unsigned char>(n % 251));
    mr.deallocate(p, n);
  }
  mr.check_invariants();
}

// -- the drop-in caching allocator on several GPUs (CUB caches device allocations
// on several devices; max_cached_bytes is per device)
// ----------------------------------------------------

int device_of(void const* p)
{
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) { return -2; }
  return attr.device;
}

TEST(gpu_caching_multi, CachesPerDeviceKeepsTheCurrentDeviceAndLimitsEachDevice)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  int n{};
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  if (n < 2) { GTEST_SKIP() << "multi-device caching needs 2 GPUs; this machine has " << n; }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  {
    CachingDeviceAllocator alloc;  // defaults: bins up to 2 MiB, 6,291,455 cached bytes per device
    constexpr std::size_t bin6 = 262144;  // 100000 B rounds up to 8^6
    void* p1{};
    ASSERT_EQ(alloc.DeviceAllocate(1, &p1, 100000), cudaSuccess);
    int current{-1};
    ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
    EXPECT_EQ(current, 0) << "DeviceAllocate(1, ...) must restore the current device";
    EXPECT_EQ(device_of(p1), 1);
    EXPECT_EQ(alloc.cached_bytes[1].live, bin6);
    EXPECT_EQ(alloc.cached_bytes.count(0), 0U);
    EXPECT_EQ(alloc.DeviceFree(0, p1), cudaErrorInvalidValue) << "p1 is not a block of device 0";
    ASSERT_EQ(alloc.DeviceFree(1, p1), cudaSuccess);
    EXPECT_EQ(alloc.cached_bytes[1].free, bin6);

    void* p0{};
    ASSERT_EQ(alloc.DeviceAllocate(0, &p0, 100000), cudaSuccess);
    EXPECT_NE(p0, p1) << "device 1's cached block must not serve device 0";
    EXPECT_EQ(device_of(p0), 0);
    EXPECT_EQ(alloc.cached_bytes[1].free, bin6);
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    void* again{};
    ASSERT_EQ(alloc.DeviceAllocate(&again, 100000), cudaSuccess);  // current device 1
    EXPECT_EQ(again, p1) << "device 1's cached block serves device 1";
    ASSERT_EQ(alloc.DeviceFree(again), cudaSuccess);  // current device 1 again
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(alloc.DeviceFree(p0), cudaSuccess);

    // max_cached_bytes is per device: one 256 KiB block fits on each.
    alloc.max_cached_bytes = bin6;
    void* q0{};
    void* q1{};
    ASSERT_EQ(alloc.DeviceAllocate(0, &q0, 100000), cudaSuccess);  // reuses p0
    ASSERT_EQ(alloc.DeviceAllocate(1, &q1, 100000), cudaSuccess);  // reuses p1
    void* extra{};
    ASSERT_EQ(alloc.DeviceAllocate(1, &extra, 100000), cudaSuccess);
    ASSERT_EQ(alloc.DeviceFree(0, q0), cudaSuccess);
    ASSERT_EQ(alloc.DeviceFree(1, q1), cudaSuccess);
    ASSERT_EQ(alloc.DeviceFree(1, extra), cudaSuccess);  // over device 1's limit: freed
    EXPECT_EQ(alloc.cached_bytes[0].free, bin6);
    EXPECT_EQ(alloc.cached_bytes[1].free, bin6);
    EXPECT_EQ(alloc.cached_blocks.size(), 2U);
    EXPECT_EQ(alloc.live_blocks.size(), 0U);
    ASSERT_EQ(alloc.FreeAllCached(), cudaSuccess);
    EXPECT_TRUE(alloc.cached_blocks.empty());
    alloc.check_invariants();
  }
  int current{-1};
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0);
}

}  // namespace
}  // namespace gpumem::test
