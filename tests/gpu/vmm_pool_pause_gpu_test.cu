// Pause and resume of vmm_pool_memory_resource on a GPU: offload keeps every byte (written and
// checked by kernels) at every address; a pointer taken before the pause is written and read after
// the resume; pause gives the memory back to the device (cudaMemGetInfo, and a cudaMalloc of it
// succeeds while paused); regions paused one by one; offload to a file keeps every byte, through
// at most two pinned slots, with 16 MiB and 256 MiB handles (a handle larger than a slot), and a
// pause after named streams waits for their kernels. Skips without a GPU.
#include <support/backend.hpp>
#include <support/kernels.hpp>

#include <gpumem/mr/vmm_pool_memory_resource.hpp>
#include <gpumem/mr/vmm_region_resource.hpp>

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace gpumem {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

void fill(void* p, std::size_t bytes, std::uint32_t seed)
{
  test::launch_fill_words(nullptr, p, bytes, seed);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

/// Words of [p, p + bytes) that differ from fill(p, bytes, seed); a CUDA error fails the test.
unsigned long long wrong_words(void const* p, std::size_t bytes, std::uint32_t seed)
{
  unsigned long long* counter{};
  EXPECT_EQ(cudaMalloc(&counter, sizeof *counter), cudaSuccess);
  EXPECT_EQ(cudaMemset(counter, 0, sizeof *counter), cudaSuccess);
  test::launch_count_wrong_words(nullptr, p, bytes, seed, counter);
  unsigned long long wrong{~0ULL};
  EXPECT_EQ(cudaMemcpy(&wrong, counter, sizeof wrong, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaFree(counter), cudaSuccess);
  return wrong;
}

std::size_t device_free_bytes()
{
  std::size_t free{};
  std::size_t total{};
  EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  return free;
}

struct block {
  void* p;
  std::size_t bytes;
};

TEST(vmm_pool_pause_gpu, OffloadKeepsEveryByteAtEveryAddress)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  mr::vmm_pool_memory_resource pool{mr::vmm_pool_options{.reserve_bytes = std::size_t{8} << 30}};
  std::vector<block> blocks;
  for (std::size_t n : {40 * MiB, 100 * MiB + 4096, 7 * MiB, 256 * MiB}) {
    blocks.push_back({pool.allocate(n), n});
    fill(blocks.back().p, n, static_cast<std::uint32_t>(blocks.size()));
  }
  auto const mapped = pool.stats().mapped_bytes;
  auto const before = device_free_bytes();
  ASSERT_TRUE(pool.pause(pause_mode::offload));
  EXPECT_EQ(pool.stats().mapped_bytes, 0U);
  EXPECT_GE(device_free_bytes(), before + mapped - 64 * MiB);  // given back to the device
  ASSERT_TRUE(pool.resume());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(wrong_words(blocks[i].p, blocks[i].bytes, static_cast<std::uint32_t>(i + 1)), 0U)
        << "block " << i;
  }
  // Written through a pointer taken before the pause, read back after the next one.
  fill(blocks[1].p, blocks[1].bytes, 77);
  ASSERT_TRUE(pool.pause(pause_mode::offload));
  ASSERT_TRUE(pool.resume());
  EXPECT_EQ(wrong_words(blocks[1].p, blocks[1].bytes, 77), 0U);
  EXPECT_EQ(wrong_words(blocks[3].p, blocks[3].bytes, 4), 0U);
  for (auto const& b : blocks) { pool.deallocate(b.p, b.bytes); }
  pool.check_invariants();
}

TEST(vmm_pool_pause_gpu, OffloadToAFileKeepsEveryByteThroughTwoPinnedSlots)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  for (std::size_t handle : {16 * MiB, 256 * MiB}) {
    mr::vmm_pool_memory_resource pool{
        mr::vmm_pool_options{.reserve_bytes = std::size_t{8} << 30, .handle_bytes = handle}};
    std::vector<block> blocks;
    for (std::size_t n : {40 * MiB, 300 * MiB + 4096, 7 * MiB}) {
      blocks.push_back({pool.allocate(n), n});
      fill(blocks.back().p, n, static_cast<std::uint32_t>(blocks.size()));
    }
    auto const mapped = pool.stats().mapped_bytes;
    auto const before = device_free_bytes();
    ASSERT_TRUE(pool.pause(pause_mode::offload_to_file)) << handle;
    auto const paused = pool.stats();
    EXPECT_EQ(paused.mapped_bytes, 0U);
    EXPECT_EQ(paused.offload_file_bytes, mapped);
    EXPECT_LE(paused.staging_bytes, 128 * MiB);  // not the pool's size
    EXPECT_GE(device_free_bytes(), before + mapped - 64 * MiB);
    ASSERT_TRUE(pool.resume()) << handle;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      EXPECT_EQ(wrong_words(blocks[i].p, blocks[i].bytes, static_cast<std::uint32_t>(i + 1)), 0U)
          << "handle " << handle << " block " << i;
    }
    fill(blocks[1].p, blocks[1].bytes, 99);  // a second cycle, new contents
    ASSERT_TRUE(pool.pause(pause_mode::offload_to_file));
    ASSERT_TRUE(pool.resume());
    EXPECT_EQ(wrong_words(blocks[1].p, blocks[1].bytes, 99), 0U) << handle;
    for (auto const& b : blocks) { pool.deallocate(b.p, b.bytes); }
    pool.check_invariants();
  }
}

TEST(vmm_pool_pause_gpu, APauseAfterNamedStreamsWaitsForTheirKernels)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  mr::vmm_pool_memory_resource pool{mr::vmm_pool_options{.reserve_bytes = std::size_t{8} << 30}};
  cudaStream_t s{};
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  auto const n = 256 * MiB;
  void* p      = pool.allocate(n, cuda_stream_view{s});
  test::launch_fill_words(s, p, n, 31);  // still running
  cuda_stream_view const named[] = {cuda_stream_view{s}};
  ASSERT_TRUE(pool.pause(pause_mode::offload, named));  // waits for s's kernel, then copies
  ASSERT_TRUE(pool.resume());
  EXPECT_EQ(wrong_words(p, n, 31), 0U);
  pool.deallocate(p, n, cuda_stream_view{s});
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
  pool.check_invariants();
}

TEST(vmm_pool_pause_gpu, DiscardGivesTheMemoryToOthersAndTheAddressesWorkAfterResume)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  mr::vmm_pool_memory_resource pool{mr::vmm_pool_options{.reserve_bytes = std::size_t{8} << 30}};
  auto const n = 512 * MiB;
  void* p      = pool.allocate(n);
  fill(p, n, 5);
  ASSERT_TRUE(pool.pause(pause_mode::discard));
  void* other{};  // another user (training) takes the memory while the pool sleeps
  ASSERT_EQ(cudaMalloc(&other, n), cudaSuccess);
  fill(other, n, 6);
  ASSERT_EQ(cudaFree(other), cudaSuccess);
  ASSERT_TRUE(pool.resume());
  fill(p, n, 8);  // the old pointer is usable again
  EXPECT_EQ(wrong_words(p, n, 8), 0U);
  pool.deallocate(p, n);
  pool.check_invariants();
}

TEST(vmm_pool_pause_gpu, RegionsPauseOneByOne)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  mr::vmm_region_resource regions{mr::vmm_pool_options{.reserve_bytes = std::size_t{4} << 30}};
  void* weights{};
  void* kv{};
  {
    mr::region_scope scope{regions, "weights"};
    weights = regions.allocate(300 * MiB);
  }
  {
    mr::region_scope scope{regions, "kv_cache"};
    kv = regions.allocate(200 * MiB);
  }
  fill(weights, 300 * MiB, 11);
  fill(kv, 200 * MiB, 12);
  ASSERT_TRUE(regions.pause("kv_cache", pause_mode::discard));
  EXPECT_EQ(wrong_words(weights, 300 * MiB, 11), 0U);  // untouched
  ASSERT_TRUE(regions.pause("weights", pause_mode::offload));
  ASSERT_TRUE(regions.resume("weights"));
  ASSERT_TRUE(regions.resume("kv_cache"));
  EXPECT_EQ(wrong_words(weights, 300 * MiB, 11), 0U);
  fill(kv, 200 * MiB, 13);
  EXPECT_EQ(wrong_words(kv, 200 * MiB, 13), 0U);
  regions.deallocate(weights, 300 * MiB);
  regions.deallocate(kv, 200 * MiB);
  regions.check_invariants();
}

}  // namespace
}  // namespace gpumem
