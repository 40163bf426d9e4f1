// 16 threads on thread_cache_resource_adaptor over a pool on the host stand-in: own streams,
// per-thread default streams and the shared legacy stream; a quarter of the frees made by another
// thread; threads that exit and are replaced while others still hold their blocks; trims; a pool
// bounded so that it runs out of memory and the caches must flush. Allocations carry tags that
// must survive; at the end every block is back in the pool and the invariants hold. Run under
// TSan in CI.
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/thread_cache_resource_adaptor.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include <support/mailbox.hpp>

namespace gpumem::test {
namespace {

using pool_t  = mr::pool_memory_resource<mr::cuda_memory_resource>;
using cache_t = mr::thread_cache_resource_adaptor<pool_t>;

struct block {
  char* ptr;
  std::size_t bytes;
  unsigned char tag;
};

constexpr int thread_count   = 16;
constexpr int generations    = 2;  // each slot runs this many threads, one after the other
constexpr int ops_per_thread = 1500;

bool intact(block const& b)
{
  return static_cast<unsigned char>(b.ptr[0]) == b.tag &&
         static_cast<unsigned char>(b.ptr[b.bytes - 1]) == b.tag;
}

struct thread_cache_stress : ::testing::Test {
  detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = std::size_t{4} << 30}};
  mr::cuda_memory_resource cuda{rt};
  pool_t pool{&cuda, 4 << 20, 24 << 20, rt};
  cache_t cache{&pool, {.max_cached_size_bytes = 64 << 10, .thread_cap_bytes = 1 << 20}};
  mailbox<block> box;
  std::atomic<int> corrupt{0};
  std::atomic<int> out_of_memory_count{0};

  void body(int t, cudaStream_t own)
  {
    cudaStream_t const s = t % 3 == 0 ? own : t % 3 == 1 ? cudaStreamPerThread : cudaStream_t{};
    std::mt19937_64 rng(static_cast<std::uint64_t>(t));
    std::vector<block> mine;
    auto release = [&](block const& b) {
      corrupt += intact(b) ? 0 : 1;
      cache.deallocate(b.ptr, b.bytes, s);
    };
    for (int i = 0; i < ops_per_thread; ++i) {
      if (mine.size() < 32 && rng() % 2 == 0) {
        auto const bytes = 256 + rng() % (96 << 10);  // some above the cached sizes
        block b{nullptr, bytes, static_cast<unsigned char>(rng())};
        try {
          b.ptr = static_cast<char*>(cache.allocate(bytes, s));
        } catch (out_of_memory const&) {  // the pool is bounded; the cache must stay usable
          ++out_of_memory_count;
          continue;
        }
        b.ptr[0] = b.ptr[bytes - 1] = static_cast<char>(b.tag);
        mine.push_back(b);
      } else if (!mine.empty()) {
        auto const at = rng() % mine.size();
        rng() % 4 == 0 ? box.put(mine[at]) : release(mine[at]);
        mine.erase(mine.begin() + static_cast<long>(at));
      }
      block b{};
      if (rng() % 4 == 0 && box.take(b)) { release(b); }
      if (rng() % 512 == 0) { cache.trim(); }
    }
    if (t % 2 == 0) {
      for (auto const& b : mine) { box.put(b); }  // exits holding blocks: others free them
    } else {
      for (auto const& b : mine) { release(b); }
    }
  }
};

TEST_F(thread_cache_stress, SixteenThreadsWithRemoteFreesAndExits)
{
  std::vector<cudaStream_t> own;
  for (int t = 0; t < thread_count; ++t) { own.push_back(rt.create_stream()); }
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&, t] {
      for (int g = 0; g < generations; ++g) {
        std::thread{[&] { body(t + g * thread_count, own[t]); }}.join();
      }
    });
  }
  for (auto& th : threads) { th.join(); }
  block b{};
  while (box.take(b)) {
    corrupt += intact(b) ? 0 : 1;
    cache.deallocate(b.ptr, b.bytes);
  }
  EXPECT_EQ(corrupt.load(), 0) << "allocations overlapped";
  cache.check_invariants();
  pool.check_invariants();
  auto const st = cache.stats();
  EXPECT_EQ(st.bytes_cached, 0U) << "every exited thread's cache was flushed";
  EXPECT_GT(st.hits, 0U);
  EXPECT_GT(st.remote_frees, 0U);
  EXPECT_EQ(pool.get_free_stats().free_bytes, pool.pool_size()) << "every block is back";
  EXPECT_EQ(cache.bad_deallocations(), 0U);
  EXPECT_EQ(pool.bad_deallocations(), 0U);
}

}  // namespace
}  // namespace gpumem::test
