// thread_cache_resource_adaptor across threads, on the host stand-in: frees by another thread,
// thread-relative streams, thread exit and the adaptor's destruction in either order, running
// out of memory, and more streams than a cache has slots.
#include "suballocator_test_helpers.hpp"

#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/thread_cache_resource_adaptor.hpp>

#include <future>
#include <memory>
#include <thread>

namespace gpumem::test {
namespace {

using pool_mr  = mr::pool_memory_resource<mr::cuda_memory_resource>;
using cache_mr = mr::thread_cache_resource_adaptor<pool_mr>;

struct thread_cache_threads : ::testing::Test {
  host_upstream up;
  pool_mr pool{&up.cuda, 16 * MiB, std::nullopt, up.rt};
  cudaStream_t a = up.rt.create_stream();

  [[nodiscard]] std::size_t pool_used() const
  {
    return pool.pool_size() - pool.get_free_stats().free_bytes;
  }
};

TEST_F(thread_cache_threads, AnotherThreadsFreeReturnsTheBlockToItsOwner)
{
  cache_mr cache{&pool};
  void* p = cache.allocate(3 * KiB, a);
  std::thread{[&] { cache.deallocate(p, 3 * KiB, a); }}.join();
  EXPECT_EQ(cache.stats().remote_frees, 1U);
  EXPECT_EQ(cache.allocate(3 * KiB, a), p);  // taken in, then reused on its stream
  EXPECT_EQ(cache.stats().hits, 1U);
  cache.deallocate(p, 3 * KiB, a);
  cache.check_invariants();
}

TEST_F(thread_cache_threads, AFreeOnAnotherThreadsPerThreadStreamGoesUpstream)
{
  cache_mr cache{&pool};
  void* p = cache.allocate(3 * KiB, cudaStreamPerThread);
  std::thread{[&] { cache.deallocate(p, 3 * KiB, cudaStreamPerThread); }}.join();
  EXPECT_EQ(pool_used(), 0U) << "the block must not wait in a cache of another thread's stream";
  void* q = cache.allocate(256, cudaStreamPerThread);  // takes in the notice, forgets p
  cache.check_invariants();
  cache.deallocate(q, 256, cudaStreamPerThread);
  EXPECT_EQ(cache.allocate(256, cudaStreamPerThread), q) << "the owner's own stream still hits";
  cache.deallocate(q, 256, cudaStreamPerThread);
}

TEST_F(thread_cache_threads, ThreadExitFlushesItsCacheAndOrphansLiveBlocks)
{
  cache_mr cache{&pool};
  void* kept = nullptr;
  std::thread{[&] {
    kept    = cache.allocate(2 * KiB, a);
    void* q = cache.allocate(8 * KiB, a);
    cache.deallocate(q, 8 * KiB, a);
  }}.join();
  auto const s = cache.stats();
  EXPECT_EQ(s.bytes_cached, 0U);
  EXPECT_EQ(s.misses, 2U) << "an exited thread's counters stay in the totals";
  EXPECT_TRUE(s.per_thread.empty());
  EXPECT_EQ(pool_used(), 2 * KiB);
  cache.check_invariants();
  cache.deallocate(kept, 2 * KiB, a);  // an orphan: straight upstream
  EXPECT_EQ(pool_used(), 0U);
  EXPECT_EQ(cache.bad_deallocations(), 0U);
  cache.check_invariants();
}

TEST_F(thread_cache_threads, TheAdaptorMayDieBeforeItsThreads)
{
  auto cache = std::make_unique<cache_mr>(&pool);
  std::promise<void> cached, destroyed;
  std::thread t{[&] {
    cache->deallocate(cache->allocate(8 * KiB, a), 8 * KiB, a);
    cached.set_value();
    destroyed.get_future().wait();
    cache_mr second{&pool};  // a new adaptor on the same thread starts clean
    second.deallocate(second.allocate(8 * KiB, a), 8 * KiB, a);
    EXPECT_EQ(second.stats().hits + second.stats().misses, 1U);
  }};
  cached.get_future().wait();
  cache.reset();
  EXPECT_EQ(pool_used(), 0U) << "the destructor returns every cache's blocks";
  destroyed.set_value();
  t.join();
  EXPECT_EQ(pool_used(), 0U);
  pool.check_invariants();
}

TEST_F(thread_cache_threads, OutOfMemoryFlushesTheCachesAndRetries)
{
  pool_mr small{&up.cuda, MiB, MiB, up.rt};
  mr::thread_cache_resource_adaptor<pool_mr> cache{&small, {.pool_fraction = 1.0}};
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) { blocks.push_back(cache.allocate(256 * KiB, a)); }
  for (void* p : blocks) { cache.deallocate(p, 256 * KiB, a); }
  ASSERT_EQ(cache.stats().bytes_cached, MiB);
  void* big = cache.allocate(512 * KiB, a);  // the pool is full of cached blocks
  EXPECT_NE(big, nullptr);
  EXPECT_EQ(cache.stats().bytes_cached, 0U);
  cache.deallocate(big, 512 * KiB, a);
  cache.check_invariants();
}

TEST_F(thread_cache_threads, ALargeRequestThatRunsOutOfMemoryAlsoFlushes)
{
  pool_mr small{&up.cuda, MiB, MiB, up.rt};
  cache_mr cache{&small, {.max_cached_size_bytes = 256 * KiB, .pool_fraction = 1.0}};
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) { blocks.push_back(cache.allocate(256 * KiB, a)); }
  for (void* p : blocks) { cache.deallocate(p, 256 * KiB, a); }
  ASSERT_EQ(cache.stats().bytes_cached, MiB);
  void* big = cache.allocate(512 * KiB, a);  // passes through; the pool is full of cached blocks
  EXPECT_EQ(cache.stats().bytes_cached, 0U);
  cache.deallocate(big, 512 * KiB, a);
  EXPECT_THROW((void)cache.allocate(2 * MiB, a), out_of_memory) << "nothing cached: no retry";
  cache.check_invariants();
}

TEST_F(thread_cache_threads, AFifthStreamTakesOverTheNextSlot)
{
  cache_mr cache{&pool};
  std::vector<cudaStream_t> streams{a};
  for (int i = 0; i < 4; ++i) { streams.push_back(up.rt.create_stream()); }
  for (auto s : streams) { cache.deallocate(cache.allocate(KiB, s), KiB, s); }
  EXPECT_EQ(cache.stats().bytes_cached, 4 * KiB);
  EXPECT_EQ(cache.stats().flushed, 1U) << "the first stream's block went back upstream";
  cache.check_invariants();
}

}  // namespace
}  // namespace gpumem::test
