// Many threads on pool, fixed_size and binning over the host stand-in: own streams, per-thread
// default streams and the shared legacy stream, frees handed to other threads, growth and reclaim
// under contention. Allocations carry tags that must survive; invariants hold at the end. Run
// under TSan in CI.
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/binning_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/fixed_size_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <support/mailbox.hpp>

namespace gpumem::test {
namespace {

using upstream_t = mr::cuda_memory_resource;

struct block {
  char* ptr;
  std::size_t bytes;
  unsigned char tag;
};

using block_mailbox = mailbox<block>;

constexpr int thread_count   = 8;
constexpr int ops_per_thread = 3000;

void tag(block const& b)
{
  b.ptr[0]           = static_cast<char>(b.tag);
  b.ptr[b.bytes - 1] = static_cast<char>(b.tag);
}

bool intact(block const& b)
{
  return static_cast<unsigned char>(b.ptr[0]) == b.tag &&
         static_cast<unsigned char>(b.ptr[b.bytes - 1]) == b.tag;
}

/// `one_stream`: every thread uses the legacy stream (one stream shared by all), except thread 0,
/// which moves to a stream of its own halfway (the virtual-memory pool's one-stream mode then ends
/// while the other threads allocate and free).
template <class Resource>
void hammer(detail::host_runtime& rt, Resource& res, std::size_t max_bytes, bool one_stream = false)
{
  block_mailbox box;
  std::atomic<int> corrupt{0};
  std::vector<cudaStream_t> own;
  for (int t = 0; t < thread_count; ++t) { own.push_back(rt.create_stream()); }
  auto body = [&](int t) {
    cudaStream_t s = t % 3 == 0 ? own[t] : t % 3 == 1 ? cudaStreamPerThread : cudaStream_t{};
    if (one_stream) { s = cudaStream_t{}; }
    std::mt19937_64 rng(t);
    std::vector<block> mine;
    auto release = [&](block const& b) {
      corrupt += intact(b) ? 0 : 1;
      res.deallocate(b.ptr, b.bytes, s);
    };
    for (int i = 0; i < ops_per_thread; ++i) {
      if (one_stream && t == 0 && i == ops_per_thread / 2) {
        for (auto const& b : mine) { release(b); }
        mine.clear();
        s = own[0];
      }
      if (mine.size() < 32 && rng() % 2 == 0) {
        auto const bytes = 256 + rng() % (max_bytes - 256);
        block b{nullptr, bytes, static_cast<unsigned char>(rng())};
        try {
          b.ptr = static_cast<char*>(res.allocate(bytes, s));
        } catch (out_of_memory const&) {  // a bounded pool may be full; it must stay usable
          continue;
        }
        tag(b);
        mine.push_back(b);
      } else if (!mine.empty()) {
        auto const at = rng() % mine.size();
        if (rng() % 8 == 0) {
          box.put(mine[at]);  // another thread frees it
        } else {
          release(mine[at]);
        }
        mine.erase(mine.begin() + static_cast<long>(at));
      }
      block b{};
      if (rng() % 4 == 0 && box.take(b)) { release(b); }
    }
    for (auto const& b : mine) { release(b); }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) { threads.emplace_back(body, t); }
  for (auto& th : threads) { th.join(); }
  block b{};
  while (box.take(b)) {
    corrupt += intact(b) ? 0 : 1;
    res.deallocate(b.ptr, b.bytes);
  }
  EXPECT_EQ(corrupt.load(), 0) << "allocations overlapped";
  res.check_invariants();
}

struct suballocator_stress : ::testing::Test {
  detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = std::size_t{4} << 30}};
  upstream_t upstream{rt};
};

TEST_F(suballocator_stress, Pool)
{
  mr::pool_memory_resource<upstream_t> pool{&upstream, 1 << 20, std::nullopt, rt};
  hammer(rt, pool, 64 << 10);
  EXPECT_EQ(pool.get_free_stats().free_bytes, pool.pool_size());
  EXPECT_EQ(pool.bad_deallocations(), 0U);
}

TEST_F(suballocator_stress, PoolNearItsMaximumReclaimsUnderContention)
{
  mr::pool_memory_resource<upstream_t> pool{&upstream, 4 << 20, 24 << 20, rt};
  hammer(rt, pool, 96 << 10);  // 8 x 32 x 96 KiB at most live: close to the maximum
  EXPECT_LE(pool.pool_size(), std::size_t{24} << 20);
}

TEST_F(suballocator_stress, VmmPool)
{
  mr::vmm_pool_memory_resource pool{{.reserve_bytes = std::size_t{1} << 30}, rt};
  hammer(rt, pool, 64 << 10);
  EXPECT_EQ(pool.get_free_stats().free_bytes, pool.pool_size());
  EXPECT_EQ(pool.bad_deallocations(), 0U);
}

TEST_F(suballocator_stress, VmmPoolThreadsSharingOneStreamThenASecondStream)
{
  mr::vmm_pool_memory_resource pool{{.reserve_bytes = std::size_t{1} << 30}, rt};
  hammer(rt, pool, 256 << 10, true);
  EXPECT_EQ(pool.bad_deallocations(), 0U);
}

TEST_F(suballocator_stress, VmmPoolOnASmallDeviceMovesGranulesUnderContention)
{
  detail::host_runtime small{detail::host_runtime_options{
      .capacity_bytes = std::size_t{20} << 20, .vmm_granularity_bytes = std::size_t{64} << 10}};
  mr::vmm_pool_memory_resource pool{{.reserve_bytes = std::size_t{256} << 20}, small};
  hammer(small, pool, 64 << 10);
  EXPECT_LE(small.vmm_state().physical_bytes, std::size_t{20} << 20);
  small.check_invariants();
}

TEST_F(suballocator_stress, FixedSize)
{
  mr::fixed_size_memory_resource<upstream_t> fixed{&upstream, 64 << 10, 16, rt};
  hammer(rt, fixed, 64 << 10);
  EXPECT_EQ(fixed.get_free_stats().free_bytes, fixed.pool_size());
}

TEST_F(suballocator_stress, Binning)
{
  mr::binning_memory_resource<upstream_t> bins{&upstream, std::int8_t{8}, std::int8_t{15}, rt};
  hammer(rt, bins, 64 << 10);
}

}  // namespace
}  // namespace gpumem::test
