// On the GPU: memory freed on stream A behind a running (spinning) kernel is not handed to stream
// B before that kernel ends — for pool, fixed_size, binning and vmm_pool, and for the per-thread
// cache in front of a pool, through an event wait (explicit streams) and through a
// synchronization (another thread's per-thread default stream). Each setup
// makes B's request able to succeed only with A's block, so the reuse path is really exercised.
// Skips with the reason when there is no GPU or the test kernels were not built.
#include <support/backend.hpp>
#include <support/kernels.hpp>

#include <gpumem/mr/binning_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/fixed_size_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>
#include <gpumem/mr/thread_cache_resource_adaptor.hpp>

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <future>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

using upstream_t      = mr::cuda_memory_resource;
constexpr int spin_ms = 300;

// The kernels exist only in CUDA test builds; without them SetUp skips before any call.
#ifdef GPUMEM_HAVE_TEST_KERNELS
void spin(cudaStream_t s, int* flag)
{
  launch_spin_then_set(s, flag, spin_ms);
}
void read(cudaStream_t s, int const* flag, int* out)
{
  launch_read_flag(s, flag, out);
}
void fill(cudaStream_t s, void* p, std::size_t n, unsigned char v)
{
  launch_fill(s, p, n, v);
}
#else
void spin(cudaStream_t, int*) {}
void read(cudaStream_t, int const*, int*) {}
void fill(cudaStream_t, void*, std::size_t, unsigned char) {}
#endif

class gpu_ordering : public ::testing::Test {
 protected:
  void SetUp() override
  {
    GPUMEM_SKIP_WITHOUT_GPU();
#ifndef GPUMEM_HAVE_TEST_KERNELS
    GTEST_SKIP() << "GPU present but the test kernels were not built (GPUMEM_BUILD_CUDA_TESTS=OFF)";
#endif
    ASSERT_EQ(cudaStreamCreateWithFlags(&a_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&b_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&flag_), sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&out_), sizeof(int)), cudaSuccess);
  }
  void TearDown() override
  {
    if (flag_ == nullptr) { return; }
    (void)cudaDeviceSynchronize();
    (void)cudaStreamDestroy(a_);
    (void)cudaStreamDestroy(b_);
    (void)cudaFree(flag_);
    (void)cudaFreeHost(out_);
  }

  /// A spins then works on p; p is freed on A at once. Returns after the free.
  void free_behind_spin(mr::device_memory_resource& mr, void* p, std::size_t n, cudaStream_t a)
  {
    free_behind_spin(mr, std::vector<void*>{p}, n, a);
  }
  /// The same for several blocks, freed in order.
  void free_behind_spin(mr::device_memory_resource& mr, std::vector<void*> const& ps, std::size_t n,
                        cudaStream_t a)
  {
    ASSERT_EQ(cudaMemsetAsync(flag_, 0, sizeof(int), a), cudaSuccess);
    spin(a, flag_);
    for (void* p : ps) { fill(a, p, n, 0xAA); }
    for (void* p : ps) { mr.deallocate(p, n, a); }
  }

  /// B reads the flag and overwrites q; both must happen after A's spin and fill.
  void expect_after_spin(void* q, std::size_t n, cudaStream_t b)
  {
    read(b, flag_, out_);
    fill(b, q, n, 0x55);
    ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
    EXPECT_EQ(*out_, 1) << "stream B ran before the kernel on A (which used the block) ended";
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    unsigned char first{}, last{};
    ASSERT_EQ(cudaMemcpy(&first, q, 1, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(&last, static_cast<char*>(q) + n - 1, 1, cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(first, 0x55) << "A's late write landed on B's allocation";
    EXPECT_EQ(last, 0x55) << "A's late write landed on B's allocation";
  }

  /// A frees `blocks` blocks (all the resource has) behind a spin; B's request takes one of them.
  void stolen_block_waits_for_spin(mr::device_memory_resource& mr, std::size_t n,
                                   std::size_t blocks = 1)
  {
    std::vector<void*> ps;
    for (std::size_t i = 0; i < blocks; ++i) { ps.push_back(mr.allocate(n, a_)); }
    free_behind_spin(mr, ps, n, a_);
    void* q = mr.allocate(n, b_);
    ASSERT_EQ(q, ps.back()) << "setup: B should only be able to get A's blocks";
    expect_after_spin(q, n, b_);
    mr.deallocate(q, n, b_);
  }

  upstream_t upstream_{};
  cudaStream_t a_{};
  cudaStream_t b_{};
  int* flag_{};
  int* out_{};
};

TEST_F(gpu_ordering, PoolBlockFreedBehindASpinningKernelWaitsForIt)
{
  constexpr std::size_t n = std::size_t{4} << 20;
  mr::pool_memory_resource<upstream_t> pool{&upstream_, n, n};
  stolen_block_waits_for_spin(pool, n);
  pool.check_invariants();
}

TEST_F(gpu_ordering, FixedSizeBlockFreedBehindASpinningKernelWaitsForIt)
{
  // 4 blocks: a same-size list with fewer is not stolen from (the resource grows instead)
  mr::fixed_size_memory_resource<upstream_t> fixed{&upstream_, std::size_t{1} << 20, 4};
  stolen_block_waits_for_spin(fixed, std::size_t{1} << 20, 4);
  EXPECT_EQ(fixed.pool_size(), std::size_t{4} << 20) << "grew instead of reusing";
  fixed.check_invariants();
}

TEST_F(gpu_ordering, BinningBlockFreedBehindASpinningKernelWaitsForIt)
{
  mr::binning_memory_resource<upstream_t> bins{&upstream_, std::int8_t{12}, std::int8_t{12}};
  constexpr std::size_t n = 4096;
  std::vector<void*> held;  // take every block of the bin but four, on A
  for (int i = 0; i < 124; ++i) { held.push_back(bins.allocate(n, a_)); }
  stolen_block_waits_for_spin(bins, n, 4);
  for (void* p : held) { bins.deallocate(p, n, a_); }
  bins.check_invariants();
}

TEST_F(gpu_ordering, AnotherThreadsPerThreadStreamIsReachedOnlyAfterItsKernel)
{
  constexpr std::size_t n = std::size_t{1} << 20;
  mr::pool_memory_resource<upstream_t> pool{&upstream_, n, n};
  std::promise<void*> freed;
  std::thread owner{[&] {
    void* p = pool.allocate(n, cuda_stream_per_thread);
    free_behind_spin(pool, p, n, cudaStreamPerThread);
    freed.set_value(p);
  }};
  void* p = freed.get_future().get();
  owner.join();
  void* q = pool.allocate(n, cuda_stream_per_thread);  // reached through a synchronization
  ASSERT_EQ(q, p);
  expect_after_spin(q, n, cudaStreamPerThread);
  pool.deallocate(q, n, cuda_stream_per_thread);
  pool.check_invariants();
}

TEST_F(gpu_ordering, VmmPoolBlockFreedBehindASpinningKernelWaitsForIt)
{
  constexpr std::size_t n = std::size_t{4} << 20;
  mr::vmm_pool_memory_resource pool{{.reserve_bytes = std::size_t{1} << 30}};
  stolen_block_waits_for_spin(pool, n);
  pool.check_invariants();
}

// A hole freed on A behind a spinning kernel is moved (unmapped there, mapped where B's larger
// request fits) only after the kernel ends: A's late writes must not fault, and B's memory is
// B's alone.
TEST_F(gpu_ordering, VmmPoolMovesAHoleOnlyAfterTheKernelUsingItEnded)
{
  constexpr std::size_t n = std::size_t{8} << 20;
  mr::vmm_pool_memory_resource pool{{.reserve_bytes = std::size_t{1} << 30}};
  void* p    = pool.allocate(n, a_);
  void* keep = pool.allocate(std::size_t{2} << 20, a_);  // p's hole cannot grow in place
  free_behind_spin(pool, p, n, a_);
  auto const before = pool.stats();
  void* q           = pool.allocate(n + (std::size_t{4} << 20), b_);  // needs p's granules
  EXPECT_EQ(pool.stats().handles, before.handles + 1) << "p's handle moved, 4 MiB more created";
  expect_after_spin(q, n + (std::size_t{4} << 20), b_);
  pool.deallocate(q, n + (std::size_t{4} << 20), b_);
  pool.deallocate(keep, std::size_t{2} << 20, a_);
  pool.check_invariants();
  auto const mapped = pool.stats().mapped_bytes;
  EXPECT_EQ(mapped, std::size_t{14} << 20);
  EXPECT_EQ(pool.trim_to(0), mapped);
  EXPECT_EQ(pool.stats().mapped_bytes, 0U);
}

using cached_pool = mr::thread_cache_resource_adaptor<mr::pool_memory_resource<upstream_t>>;

// The block sits in the cache for A; B's request finds the pool full, the cache flushes the block
// to the pool on A, and the pool hands it to B behind an event wait.
TEST_F(gpu_ordering, ThreadCacheBlockFreedBehindASpinningKernelWaitsForIt)
{
  constexpr std::size_t n = std::size_t{1} << 20;
  mr::pool_memory_resource<upstream_t> pool{&upstream_, n, n};
  cached_pool cache{&pool, {.pool_fraction = 1.0}};
  void* p = cache.allocate(n, a_);
  free_behind_spin(cache, p, n, a_);
  ASSERT_EQ(cache.stats().bytes_cached, n) << "setup: the block should wait in the cache";
  EXPECT_EQ(cache.allocate(n, a_), p) << "the cache hands it back on A at once";
  cache.deallocate(p, n, a_);
  void* q = cache.allocate(n, b_);
  ASSERT_EQ(q, p) << "setup: B should only be able to get A's block";
  expect_after_spin(q, n, b_);
  cache.deallocate(q, n, b_);
  cache.check_invariants();
  pool.check_invariants();
}

// Another thread frees the block on A behind the kernel: it goes back to the allocating thread's
// cache for A, and reaches B only through the pool.
TEST_F(gpu_ordering, ThreadCacheBlockFreedByAnotherThreadWaitsForItsKernel)
{
  constexpr std::size_t n = std::size_t{1} << 20;
  mr::pool_memory_resource<upstream_t> pool{&upstream_, n, n};
  cached_pool cache{&pool, {.pool_fraction = 1.0}};
  void* p = cache.allocate(n, a_);
  std::thread{[&] { free_behind_spin(cache, p, n, a_); }}.join();
  void* q = cache.allocate(n, b_);
  ASSERT_EQ(q, p) << "setup: B should only be able to get A's block";
  EXPECT_EQ(cache.stats().remote_frees, 1U);
  expect_after_spin(q, n, b_);
  cache.deallocate(q, n, b_);
  cache.check_invariants();
}

// A thread caches a block for its per-thread stream and exits; the flush at its exit hands the
// block to the pool on that stream, which another thread reaches only through a synchronization.
TEST_F(gpu_ordering, ThreadCacheOfAnExitedThreadsPerThreadStreamWaitsForItsKernel)
{
  constexpr std::size_t n = std::size_t{1} << 20;
  mr::pool_memory_resource<upstream_t> pool{&upstream_, n, n};
  cached_pool cache{&pool, {.pool_fraction = 1.0}};
  void* p = nullptr;
  std::thread{[&] {
    p = cache.allocate(n, cuda_stream_per_thread);
    free_behind_spin(cache, p, n, cudaStreamPerThread);
  }}.join();
  void* q = cache.allocate(n, cuda_stream_per_thread);
  ASSERT_EQ(q, p);
  expect_after_spin(q, n, cudaStreamPerThread);
  cache.deallocate(q, n, cuda_stream_per_thread);
  cache.check_invariants();
}

}  // namespace
}  // namespace gpumem::test
