// White-box tests of thread_cache_resource_adaptor over a pool on the host stand-in: hits stay in
// the thread, the stream rule, size classes, bounds, flushes, remote frees, thread exit in both
// orders with the adaptor's destruction, and bad frees.
#include "suballocator_test_helpers.hpp"

#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/thread_cache_resource_adaptor.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <algorithm>
#include <future>
#include <thread>

namespace gpumem::test {
namespace {

using pool_mr  = mr::pool_memory_resource<mr::cuda_memory_resource>;
using cache_mr = mr::thread_cache_resource_adaptor<pool_mr>;

struct thread_cache_test : ::testing::Test {
  host_upstream up;
  pool_mr pool{&up.cuda, 64 * MiB, std::nullopt, up.rt};
  cudaStream_t a = up.rt.create_stream();
  cudaStream_t b = up.rt.create_stream();

  /// Bytes the pool has handed out (to the cache system or through it).
  [[nodiscard]] std::size_t pool_used() const
  {
    return pool.pool_size() - pool.get_free_stats().free_bytes;
  }
  [[nodiscard]] static bool is_cached(cache_mr const& c, void* p)
  {
    auto const blocks = c.cached_blocks();
    return std::any_of(blocks.begin(), blocks.end(), [p](auto const& b) { return b.first == p; });
  }
};

TEST_F(thread_cache_test, AFreedBlockIsReusedOnItsStreamWithoutTheUpstream)
{
  cache_mr cache{&pool};
  void* p = cache.allocate(4 * KiB, a);
  cache.deallocate(p, 4 * KiB, a);
  auto const used = pool_used();
  EXPECT_EQ(used, 4 * KiB);  // a miss takes the request's size, rounded to 256 B
  EXPECT_EQ(cache.allocate(4 * KiB, a), p);
  EXPECT_EQ(pool_used(), used);
  auto const s = cache.stats();
  EXPECT_EQ(s.hits, 1U);
  EXPECT_EQ(s.misses, 1U);
  ASSERT_EQ(s.per_thread.size(), 1U);
  EXPECT_EQ(s.per_thread[0].hits, 1U);
  cache.deallocate(p, 4 * KiB, a);
  EXPECT_EQ(cache.stats().bytes_cached, 4 * KiB);
  cache.check_invariants();
}

TEST_F(thread_cache_test, ABlockFreedOnAIsNotReusedFromTheCacheOnB)
{
  cache_mr cache{&pool};
  void* p = cache.allocate(1000, a);
  up.rt.enqueue(a);  // A still uses p
  cache.deallocate(p, 1000, a);
  void* q = cache.allocate(1000, b);
  EXPECT_NE(q, p);
  EXPECT_TRUE(is_cached(cache, p));
  EXPECT_EQ(cache.allocate(1000, a), p);
  cache.deallocate(q, 1000, b);
  cache.deallocate(p, 1000, a);
  cache.check_invariants();
}

TEST_F(thread_cache_test, ACachedBlockServesItsClassAndTheClassBelow)
{
  cache_mr cache{&pool};
  void* small = cache.allocate(17 * 256, a);  // class 4352..4608
  void* big   = cache.allocate(20 * 256, a);  // the next class up
  cache.deallocate(small, 17 * 256, a);
  cache.deallocate(big, 20 * 256, a);
  void* x = cache.allocate(18 * 256, a);  // small is too small; big fits
  EXPECT_EQ(x, big);
  void* y = cache.allocate(17 * 256, a);
  EXPECT_EQ(y, small);
  void* z = cache.allocate(17 * 256, a);  // nothing left: a miss
  EXPECT_NE(z, small);
  EXPECT_EQ(cache.stats().misses, 3U);
  cache.deallocate(x, 18 * 256, a);
  cache.deallocate(y, 17 * 256, a);
  cache.deallocate(z, 17 * 256, a);
  cache.check_invariants();
}

TEST_F(thread_cache_test, LargeRequestsPassThrough)
{
  cache_mr cache{&pool, {.max_cached_size_bytes = 64 * KiB}};
  void* p = cache.allocate(64 * KiB + 1, a);
  cache.deallocate(p, 64 * KiB + 1, a);
  EXPECT_EQ(pool_used(), 0U);
  EXPECT_EQ(cache.stats().passed_through, 1U);
  EXPECT_TRUE(cache.cached_blocks().empty());
}

TEST_F(thread_cache_test, BadOptionsAreLogicErrors)
{
  EXPECT_THROW(cache_mr(&pool, {.max_cached_size_bytes = 0}), logic_error);
  EXPECT_THROW(cache_mr(&pool, {.max_cached_size_bytes = std::size_t{8} << 30}), logic_error);
  auto const msg = message_of<logic_error>([&] { cache_mr c(&pool, {.pool_fraction = 1.5}); });
  EXPECT_NE(msg.find("1.5"), std::string::npos) << msg;
  EXPECT_THROW(cache_mr(static_cast<pool_mr*>(nullptr)), logic_error);
}

TEST_F(thread_cache_test, DoubleFreeIsReportedCountedAndHarmless)
{
  cache_mr cache{&pool};
  void* p = cache.allocate(2 * KiB, a);
  cache.deallocate(p, 2 * KiB, a);
  cache.deallocate(p, 2 * KiB, a);
  EXPECT_EQ(cache.bad_deallocations(), 1U);
  cache.check_invariants();
  void* q = cache.allocate(2 * KiB, a);
  void* r = cache.allocate(2 * KiB, a);
  EXPECT_EQ(q, p);
  EXPECT_NE(r, p);  // cached once only
  cache.deallocate(q, 2 * KiB, a);
  cache.deallocate(r, 2 * KiB, a);
  cache.check_invariants();
}

TEST_F(thread_cache_test, WrongSizeIsCountedAndFreesTheTrueBlock)
{
  cache_mr cache{&pool};
  void* p = cache.allocate(2 * KiB, a);
  cache.deallocate(p, 3 * KiB, a);
  EXPECT_EQ(cache.bad_deallocations(), 1U);
  EXPECT_EQ(cache.stats().bytes_cached, 2 * KiB);
  cache.check_invariants();
}

TEST_F(thread_cache_test, AWrongSizeAboveTheCachedSizesNeverReachesTheUpstream)
{
  cache_mr cache{&pool, {.max_cached_size_bytes = 64 * KiB}};
  void* p = cache.allocate(1000, a);
  cache.deallocate(p, 2 * MiB, a);
  EXPECT_EQ(cache.bad_deallocations(), 1U);
  EXPECT_EQ(pool.bad_deallocations(), 0U);
  EXPECT_EQ(cache.stats().bytes_cached, 1024U) << "the block is cached with its true size";
  cache.check_invariants();
  EXPECT_EQ(cache.allocate(1000, a), p);
  cache.deallocate(p, 1000, a);
}

TEST_F(thread_cache_test, ForeignPointerGoesToTheUpstreamWhichReportsIt)
{
  cache_mr cache{&pool};
  int local = 0;
  cache.deallocate(&local, 256, a);
  EXPECT_EQ(pool.bad_deallocations(), 1U);
  EXPECT_TRUE(cache.cached_blocks().empty());
  cache.check_invariants();
}

TEST_F(thread_cache_test, PerThreadCapFlushesTheColderHalf)
{
  cache_mr cache{&pool, {.thread_cap_bytes = 64 * KiB}};
  std::vector<void*> blocks;
  for (int i = 0; i < 32; ++i) { blocks.push_back(cache.allocate(4 * KiB, a)); }
  for (void* p : blocks) { cache.deallocate(p, 4 * KiB, a); }
  auto const s = cache.stats();
  EXPECT_LE(s.bytes_cached, 64 * KiB);
  EXPECT_GT(s.flushed, 0U);
  EXPECT_EQ(pool_used(), s.bytes_cached);
  EXPECT_TRUE(is_cached(cache, blocks.back())) << "the most recently freed block is kept";
  cache.check_invariants();
}

TEST_F(thread_cache_test, TotalCapIsAFractionOfThePool)
{
  // 1 MiB of the 64 MiB pool (the floors, 4 of the largest cached blocks and no per-thread floor,
  // are lower here)
  cache_mr cache{
      &pool,
      {.max_cached_size_bytes = 64 * KiB, .pool_fraction = 1.0 / 64, .thread_floor_bytes = 0}};
  EXPECT_EQ(cache.stats().cap_bytes, MiB);
  std::vector<void*> blocks;
  for (int i = 0; i < 32; ++i) { blocks.push_back(cache.allocate(64 * KiB, a)); }
  for (void* p : blocks) { cache.deallocate(p, 64 * KiB, a); }
  EXPECT_LE(cache.stats().bytes_cached, MiB);
  cache.check_invariants();
}

TEST_F(thread_cache_test, OverAPoolThatGrowsByChunksTheThreadCapStays)
{
  cache_mr cache{&pool, {.thread_floor_bytes = 2 * MiB}};
  EXPECT_EQ(cache.options().thread_cap_bytes, 32 * MiB);
}

TEST_F(thread_cache_test, TheFractionCapHasAFloorOfFourLargestBlocks)
{
  cache_mr cache{&pool, {.max_cached_size_bytes = 4 * MiB, .pool_fraction = 0.01}};
  EXPECT_EQ(cache.stats().cap_bytes, 16 * MiB);
}

TEST_F(thread_cache_test, TrimReturnsTheCallersBlocksAndOthersAtTheirNextCall)
{
  cache_mr cache{&pool};
  std::promise<void> cached, trimmed, honoured, done;
  std::thread other{[&] {
    cache.deallocate(cache.allocate(8 * KiB, b), 8 * KiB, b);
    cached.set_value();
    trimmed.get_future().wait();
    void* p = cache.allocate(256, b);  // any call on a cacheable size honours the request
    honoured.set_value();
    done.get_future().wait();
    cache.deallocate(p, 256, b);
  }};
  cache.deallocate(cache.allocate(4 * KiB, a), 4 * KiB, a);
  cached.get_future().wait();
  cache.trim();
  EXPECT_EQ(cache.stats().bytes_cached, 8 * KiB);  // only the other thread's block is left
  trimmed.set_value();
  honoured.get_future().wait();
  EXPECT_EQ(cache.stats().bytes_cached, 0U);
  EXPECT_EQ(pool_used(), 256U);
  cache.check_invariants();
  done.set_value();
  other.join();
}

}  // namespace
}  // namespace gpumem::test

namespace gpumem::test {
namespace {

// A lean pool (vmm_pool) on a 64 MiB device, for the cache's growth tests.
struct thread_cache_lean_pool : ::testing::Test {
  detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = 64 * MiB}};
  cudaStream_t a = rt.create_stream();
  mr::vmm_pool_memory_resource pool{mr::vmm_pool_options{.reserve_bytes = 256 * MiB}, rt};
};

// Before a lean pool takes new physical memory, the growing thread's cached blocks go back to it
// when they are more than the thread's floor (none here): two cached 1 MiB blocks make the 2 MiB
// a larger request needs, and nothing new is mapped.
TEST_F(thread_cache_lean_pool, TheGrowingThreadsCacheIsFlushedBeforeTheLeanPoolMapsMore)
{
  mr::thread_cache_resource_adaptor<mr::vmm_pool_memory_resource> cache{&pool,
                                                                        {.thread_floor_bytes = 0}};
  void* p = cache.allocate(MiB, a);
  void* q = cache.allocate(MiB, a);
  EXPECT_EQ(pool.stats().mapped_bytes, 2 * MiB);
  cache.deallocate(p, MiB, a);
  cache.deallocate(q, MiB, a);
  EXPECT_EQ(cache.stats().bytes_cached, 2 * MiB);
  void* r = cache.allocate(2 * MiB, a);  // passes through; the pool would grow
  EXPECT_EQ(pool.stats().mapped_bytes, 2 * MiB) << "served from the flushed blocks";
  EXPECT_EQ(cache.stats().bytes_cached, 0U);
  EXPECT_EQ(cache.stats().growth_flushes, 1U);
  cache.deallocate(r, 2 * MiB, a);
  void* s = cache.allocate(4 * MiB, a);  // nothing cached: the pool grows as usual
  EXPECT_EQ(cache.stats().growth_flushes, 1U);
  cache.deallocate(s, 4 * MiB, a);
  cache.check_invariants();
  pool.check_invariants();
}

// Two caches over one pool both give their blocks back before it grows (each registers its own
// growth hook; a second cache must not replace the first's).
TEST_F(thread_cache_lean_pool, TwoCachesOverOnePoolAreBothFlushedBeforeItGrows)
{
  using cache_t = mr::thread_cache_resource_adaptor<mr::vmm_pool_memory_resource>;
  cache_t first{&pool, {.thread_floor_bytes = 0}};
  cache_t second{&pool, {.thread_floor_bytes = 0}};
  void* p = first.allocate(MiB, a);
  void* q = second.allocate(MiB, a);
  first.deallocate(p, MiB, a);
  second.deallocate(q, MiB, a);
  void* r = first.allocate(2 * MiB, a);  // passes through; the pool would grow
  EXPECT_EQ(pool.stats().mapped_bytes, 2 * MiB) << "served from both caches' blocks";
  EXPECT_EQ(first.stats().growth_flushes, 1U);
  EXPECT_EQ(second.stats().growth_flushes, 1U);
  first.deallocate(r, 2 * MiB, a);
  {
    cache_t third{&pool, {.thread_floor_bytes = 0}};  // added, then removed when it goes
  }
  void* s = second.allocate(MiB, a);
  second.deallocate(s, MiB, a);
  void* t = first.allocate(4 * MiB, a);
  EXPECT_EQ(second.stats().growth_flushes, 2U) << "the second's hook outlived the third's";
  first.deallocate(t, 4 * MiB, a);
  first.check_invariants();
  second.check_invariants();
  pool.check_invariants();
}

// Over a lean pool a thread's cache holds at most its floor: blocks waiting in a cache make such a
// pool grow (a replay over vmm_pool grew again in its warm pass with 32 MiB per thread).
TEST_F(thread_cache_lean_pool, OverALeanPoolEachThreadCachesAtMostItsFloor)
{
  mr::thread_cache_resource_adaptor<mr::vmm_pool_memory_resource> cache{
      &pool, {.thread_floor_bytes = 2 * MiB}};
  EXPECT_EQ(cache.options().thread_cap_bytes, 2 * MiB);
  std::vector<void*> blocks;
  for (int i = 0; i < 3; ++i) { blocks.push_back(cache.allocate(MiB, a)); }
  for (void* p : blocks) { cache.deallocate(p, MiB, a); }
  EXPECT_LE(cache.stats().bytes_cached, 2 * MiB);
  cache.check_invariants();
  pool.check_invariants();
}

// A cache holding no more than its floor stays when the pool grows: a lean pool is always full,
// and emptying the cache at each of its growths would make nearly every request a miss.
TEST_F(thread_cache_lean_pool, ACacheWithinItsFloorIsKeptWhenThePoolGrows)
{
  mr::thread_cache_resource_adaptor<mr::vmm_pool_memory_resource> cache{
      &pool, {.thread_floor_bytes = 2 * MiB}};
  void* p = cache.allocate(MiB, a);
  void* q = cache.allocate(MiB, a);
  cache.deallocate(p, MiB, a);
  cache.deallocate(q, MiB, a);
  void* r = cache.allocate(2 * MiB, a);
  EXPECT_EQ(cache.stats().bytes_cached, 2 * MiB) << "the cache kept its blocks";
  EXPECT_EQ(cache.stats().growth_flushes, 0U);
  EXPECT_EQ(pool.stats().mapped_bytes, 4 * MiB) << "the pool grew instead";
  EXPECT_EQ(cache.allocate(MiB, a), q) << "and the cache still serves its own";
  cache.deallocate(q, MiB, a);
  cache.deallocate(r, 2 * MiB, a);
  cache.check_invariants();
  pool.check_invariants();
}

// Over a small lean pool, the cap on all caches is never below the floor of each thread that has
// a cache: every thread keeps room for its blocks however many threads share the pool.
TEST(thread_cache_growth, TheCapOverASmallPoolGrowsWithTheThreadsThatCache)
{
  detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = 256 * MiB}};
  mr::vmm_pool_memory_resource pool{mr::vmm_pool_options{.reserve_bytes = 512 * MiB}, rt};
  mr::thread_cache_resource_adaptor<mr::vmm_pool_memory_resource> cache{
      &pool, {.max_cached_size_bytes = 64 * KiB, .thread_floor_bytes = 3 * MiB}};
  auto const a = rt.create_stream();
  EXPECT_EQ(cache.stats().cap_bytes, 256 * KiB) << "4 of the largest blocks, no thread yet";
  cache.deallocate(cache.allocate(KiB, a), KiB, a);
  EXPECT_EQ(cache.stats().cap_bytes, 3 * MiB);
  std::vector<std::thread> threads;
  std::atomic<int> ready{0};
  std::atomic<bool> done{false};
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&] {
      auto const s = rt.create_stream();
      cache.deallocate(cache.allocate(KiB, s), KiB, s);
      ready.fetch_add(1);
      while (!done.load()) { std::this_thread::yield(); }
    });
  }
  while (ready.load() < 3) { std::this_thread::yield(); }
  EXPECT_EQ(cache.stats().cap_bytes, 12 * MiB) << "four threads with a cache";
  done.store(true);
  for (auto& t : threads) { t.join(); }
  EXPECT_EQ(cache.stats().cap_bytes, 3 * MiB) << "the exited threads' floors are gone";
  cache.check_invariants();
}

// Another thread's growth does not touch this thread's cache (its bins are its own), and the
// hook goes away with the adaptor.
TEST_F(thread_cache_lean_pool, OnlyTheGrowingThreadsCacheIsFlushedAndTheHookLeavesWithTheAdaptor)
{
  {
    mr::thread_cache_resource_adaptor<mr::vmm_pool_memory_resource> cache{&pool};
    cache.deallocate(cache.allocate(MiB, a), MiB, a);
    std::thread([&] { cache.deallocate(cache.allocate(8 * MiB, a), 8 * MiB, a); }).join();
    EXPECT_EQ(cache.stats().bytes_cached, MiB);
    EXPECT_EQ(cache.stats().growth_flushes, 0U);
    cache.check_invariants();
  }
  void* p = pool.allocate(32 * MiB, a);  // grows with no adaptor left: no hook to call
  pool.deallocate(p, 32 * MiB, a);
  pool.check_invariants();
}

// With many threads over a lean pool the floors add up (128 threads: 1.19x the pool alone's
// footprint): a growth asks the other threads' caches to flush once all caches hold more than
// 1/16 of the pool fraction. Here another thread's growth empties this thread's cache at its next
// call (the growth itself does not wait for it).
TEST_F(thread_cache_lean_pool, AGrowthAsksTheOtherCachesToFlushWhenTheyHoldTooMuchInAll)
{
  mr::thread_cache_resource_adaptor<mr::vmm_pool_memory_resource> cache{&pool};
  void* p = cache.allocate(MiB, a);
  cache.deallocate(p, MiB, a);
  EXPECT_EQ(cache.stats().bytes_cached, MiB);
  std::thread([&] {
    auto const b = rt.create_stream();
    cache.deallocate(cache.allocate(KiB, b), KiB, b);  // a cache of its own: two caches
    void* big = cache.allocate(8 * MiB, b);            // the pool grows
    cache.deallocate(big, 8 * MiB, b);
  }).join();
  EXPECT_EQ(cache.stats().bytes_cached, MiB) << "not flushed by the other thread";
  void* q = cache.allocate(KiB, a);  // this thread's next call flushes its cache
  EXPECT_EQ(cache.stats().bytes_cached, 0U);
  cache.deallocate(q, KiB, a);
  cache.check_invariants();
}

}  // namespace
}  // namespace gpumem::test
