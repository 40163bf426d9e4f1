// 16 threads on thread_cache_resource_adaptor over a pool on the host stand-in: own streams,
// per-thread default streams and the shared legacy stream; a quarter of the frees made by another
// thread; threads that exit and are replaced while others still hold their blocks; trims; a pool
// bounded so that it runs out of memory and the caches must flush. Allocations carry tags that
// must survive, and after every allocation and before every free the live blocks of all threads
// are checked not to overlap. At the end every block is back in the pool and the invariants hold.
// Each case runs with several seeds; a second shape has many short-lived threads whose blocks are
// freed by others on their per-thread streams (blocks that leave a cache while its owner exits).
// Run under TSan and ASan in CI. Fixed interleavings of the same races:
// tests/unit/thread_cache_interleaving_test.cpp.
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/thread_cache_resource_adaptor.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
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

/// The shape of one run.
struct shape {
  int threads;
  int generations;  // each slot runs this many threads, one after the other
  int ops_per_thread;
  int remote_percent;  // of frees handed to another thread
};
constexpr shape mixed{16, 2, 1500, 25};
constexpr shape short_lived{16, 12, 120, 50};

/// Every block handed out and not yet freed, across threads: an allocation that overlaps a live
/// block means the cache (or the pool) handed one piece of memory to two owners.
class live_ranges {
 public:
  void claim(char* p, std::size_t bytes)
  {
    std::lock_guard lock{mutex_};
    auto next = live_.lower_bound(p);
    bool const clash =
        (next != live_.end() && p + bytes > next->first) ||
        (next != live_.begin() && std::prev(next)->first + std::prev(next)->second > p);
    overlaps_ += clash ? 1 : 0;
    live_[p] = bytes;
  }
  void release(char* p)
  {
    std::lock_guard lock{mutex_};
    live_.erase(p);
  }
  [[nodiscard]] int overlaps() const
  {
    std::lock_guard lock{mutex_};
    return overlaps_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<char*, std::size_t> live_;
  int overlaps_{};
};

bool intact(block const& b)
{
  return static_cast<unsigned char>(b.ptr[0]) == b.tag &&
         static_cast<unsigned char>(b.ptr[b.bytes - 1]) == b.tag;
}

struct thread_cache_stress : ::testing::TestWithParam<std::uint64_t> {
  detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = std::size_t{4} << 30}};
  mr::cuda_memory_resource cuda{rt};
  pool_t pool{&cuda, 4 << 20, 24 << 20, rt};
  cache_t cache{&pool, {.max_cached_size_bytes = 64 << 10, .thread_cap_bytes = 1 << 20}};
  mailbox<block> box;
  std::atomic<int> corrupt{0};
  std::atomic<int> out_of_memory_count{0};
  live_ranges live;

  void body(shape const& sh, int t, cudaStream_t own)
  {
    cudaStream_t const s = t % 3 == 0 ? own : t % 3 == 1 ? cudaStreamPerThread : cudaStream_t{};
    std::mt19937_64 rng(GetParam() * 1000003 + static_cast<std::uint64_t>(t));
    std::vector<block> mine;
    auto release = [&](block const& b) {
      corrupt += intact(b) ? 0 : 1;
      live.release(b.ptr);
      cache.deallocate(b.ptr, b.bytes, s);
    };
    for (int i = 0; i < sh.ops_per_thread; ++i) {
      if (mine.size() < 32 && rng() % 2 == 0) {
        auto const bytes = 256 + rng() % (96 << 10);  // some above the cached sizes
        block b{nullptr, bytes, static_cast<unsigned char>(rng())};
        try {
          b.ptr = static_cast<char*>(cache.allocate(bytes, s));
        } catch (out_of_memory const&) {  // the pool is bounded; the cache must stay usable
          ++out_of_memory_count;
          continue;
        }
        live.claim(b.ptr, bytes);
        b.ptr[0] = b.ptr[bytes - 1] = static_cast<char>(b.tag);
        mine.push_back(b);
      } else if (!mine.empty()) {
        auto const at = rng() % mine.size();
        rng() % 100 < static_cast<unsigned>(sh.remote_percent) ? box.put(mine[at])
                                                               : release(mine[at]);
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

  void run(shape const& sh)
  {
    std::vector<cudaStream_t> own;
    for (int t = 0; t < sh.threads; ++t) { own.push_back(rt.create_stream()); }
    std::vector<std::thread> threads;
    for (int t = 0; t < sh.threads; ++t) {
      threads.emplace_back([&, t] {
        for (int g = 0; g < sh.generations; ++g) {
          std::thread{[&] { body(sh, t + g * sh.threads, own[t]); }}.join();
        }
      });
    }
    for (auto& th : threads) { th.join(); }
    block b{};
    while (box.take(b)) {
      corrupt += intact(b) ? 0 : 1;
      live.release(b.ptr);
      cache.deallocate(b.ptr, b.bytes);
    }
    EXPECT_EQ(live.overlaps(), 0) << "two live allocations overlapped";
    EXPECT_EQ(corrupt.load(), 0) << "an allocation was overwritten";
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
};

TEST_P(thread_cache_stress, SixteenThreadsWithRemoteFreesAndExits)
{
  run(mixed);
}

TEST_P(thread_cache_stress, ShortLivedThreadsWhoseBlocksOthersFree)
{
  run(short_lived);
}

INSTANTIATE_TEST_SUITE_P(seeds, thread_cache_stress, ::testing::Values(1, 2, 3, 4));

}  // namespace
}  // namespace gpumem::test
