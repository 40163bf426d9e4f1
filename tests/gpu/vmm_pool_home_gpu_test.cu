// vmm_pool's home layout on a GPU: the repeated job of the host-stand-in test, every block written
// by a kernel when it is allocated and checked by another before it is freed. With the stream
// synchronized after each kernel, the pool takes its layout home before each run after the second
// (moved handles mapped and granted again) and every such run places its blocks where the second
// did; with the kernels left running, what may move is the pool's to decide, and every byte is
// still right.
// Skips without a GPU.
#include <support/backend.hpp>
#include <support/kernels.hpp>
#include <support/repeated_job.hpp>

#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace gpumem {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

/// The seed a block's words are written with: from its address, so no table is needed.
std::uint32_t seed_of(void const* p)
{
  return static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(p) >> 8);
}

struct vmm_pool_home_gpu : ::testing::Test {
  void SetUp() override
  {
    GPUMEM_SKIP_WITHOUT_GPU();
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&wrong, sizeof *wrong), cudaSuccess);
    ASSERT_EQ(cudaMemset(wrong, 0, sizeof *wrong), cudaSuccess);
  }
  void TearDown() override
  {
    if (wrong != nullptr) { EXPECT_EQ(cudaFree(wrong), cudaSuccess); }
    if (stream != nullptr) { EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess); }
  }
  /// One run: each block filled on the stream when allocated, checked on it before its free;
  /// `wait`: the stream synchronized after each kernel (the pool's growths then find it idle
  /// and may move free memory, as on the host stand-in, whose streams the test completes).
  std::vector<void*> run(mr::vmm_pool_memory_resource& pool, std::vector<test::job_step> const& job,
                         bool wait)
  {
    auto const done = [&] {
      if (wait) { ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess); }
    };
    return test::run_job(
        job, pool, stream,
        [&](void* p, std::size_t n) {
          test::launch_fill_words(stream, p, n, seed_of(p));
          done();
        },
        [&](void* p, std::size_t n) {
          test::launch_count_wrong_words(stream, p, n, seed_of(p), wrong);
          done();
        });
  }
  unsigned long long wrong_words()
  {
    unsigned long long n{~0ULL};
    EXPECT_EQ(cudaMemcpy(&n, wrong, sizeof n, cudaMemcpyDeviceToHost), cudaSuccess);
    return n;
  }

  cudaStream_t stream{};
  unsigned long long* wrong{};
};

TEST_F(vmm_pool_home_gpu, ARepeatedJobStartsEveryRunFromTheSameLayoutAndKeepsEveryByte)
{
  mr::vmm_pool_memory_resource pool{
      mr::vmm_pool_options{.reserve_bytes = std::size_t{16} << 30, .handle_bytes = 4 * MiB}};
  auto const job = test::make_repeated_job(19, 300);  // the host test's drifting job
  std::vector<std::vector<void*>> runs;
  for (int r = 0; r < 6; ++r) {
    runs.push_back(run(pool, job, true));
    pool.check_invariants();
  }
  EXPECT_EQ(wrong_words(), 0U);
  for (int r = 2; r < 6; ++r) { EXPECT_EQ(runs[r], runs[1]) << "run " << r; }
  auto const s = pool.stats();
  EXPECT_EQ(s.home_returns, 4U) << "before each run after the second";
  EXPECT_GT(s.home_moved_handles, 0U);
}

TEST_F(vmm_pool_home_gpu, WithTheStreamBusyAtEachRunsEndEveryByteIsStillRight)
{
  mr::vmm_pool_memory_resource pool{
      mr::vmm_pool_options{.reserve_bytes = std::size_t{16} << 30, .handle_bytes = 4 * MiB}};
  auto const job = test::make_repeated_job(19, 300);
  for (int r = 0; r < 6; ++r) {
    (void)run(pool, job, false);  // the next run starts while the kernels may still run
    pool.check_invariants();
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(wrong_words(), 0U);
}

}  // namespace
}  // namespace gpumem
