// The stream rules of the stream-ordered core, driven deterministically through the host stand-in:
// a block freed on A is reused at once on A, reaches B only once B is ordered after the free, and
// a per-thread default stream of another thread is only reached behind a synchronization.
#include "suballocator_test_helpers.hpp"

#include <gpumem/mr/fixed_size_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>

#include <future>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

using pool_mr  = mr::pool_memory_resource<mr::cuda_memory_resource>;
using fixed_mr = mr::fixed_size_memory_resource<mr::cuda_memory_resource>;

struct ordering_test : ::testing::Test {
  host_upstream up;
  cudaStream_t a = up.rt.create_stream();
  cudaStream_t b = up.rt.create_stream();

  /// True when work enqueued on `s` now cannot complete yet (it waits for something).
  bool new_work_waits(cudaStream_t s)
  {
    up.rt.enqueue(s);
    up.rt.complete(s);
    return up.rt.completed(s) < up.rt.enqueued(s);
  }
};

TEST_F(ordering_test, FreedBlockIsReusedAtOnceOnTheSameStream)
{
  pool_mr pool{&up.cuda, MiB, MiB, up.rt};
  void* p = pool.allocate(MiB, a);
  up.rt.enqueue(a);  // A still works on p
  pool.deallocate(p, MiB, a);
  auto const before = up.rt.calls();
  EXPECT_EQ(pool.allocate(MiB, a), p);
  EXPECT_EQ(up.rt.calls().event_record, before.event_record);
  EXPECT_EQ(up.rt.calls().synchronize, before.synchronize);
  pool.deallocate(p, MiB, a);
}

/// A frees `blocks` blocks of n bytes (all the pool has) while its work may still use them; B's
/// allocation steals one and must wait for A's work.
template <class Pool>
void expect_stolen_block_is_ordered(ordering_test& t, Pool& pool, std::size_t n,
                                    std::size_t blocks = 1)
{
  std::vector<void*> on_a;
  for (std::size_t i = 0; i < blocks; ++i) { on_a.push_back(pool.allocate(n, t.a)); }
  t.up.rt.enqueue(t.a);  // pending work on them
  for (void* p : on_a) { pool.deallocate(p, n, t.a); }
  void* p           = on_a.back();  // the most recently freed goes first
  auto const before = t.up.rt.calls();
  void* q           = pool.allocate(n, t.b);  // nothing else exists: the block is stolen from A
  ASSERT_EQ(q, p);
  EXPECT_EQ(t.up.rt.calls().stream_wait_event, before.stream_wait_event + 1);
  EXPECT_TRUE(t.new_work_waits(t.b)) << "B may run before A's work on the block is done";
  t.up.rt.complete(t.a);
  t.up.rt.complete(t.b);
  EXPECT_EQ(t.up.rt.completed(t.b), t.up.rt.enqueued(t.b));
  pool.deallocate(q, n, t.b);
  pool.check_invariants();
}

TEST_F(ordering_test, PoolBlockFreedOnAReachesBOnlyAfterBWaitsForTheFree)
{
  pool_mr pool{&up.cuda, MiB, MiB, up.rt};
  expect_stolen_block_is_ordered(*this, pool, MiB);
}

TEST_F(ordering_test, FixedSizeBlockFreedOnAReachesBOnlyAfterBWaitsForTheFree)
{
  // A same-size list is stolen from only when it holds a few blocks (else the pool grows)
  fixed_mr fixed{&up.cuda, 64 * KiB, 4, up.rt};
  expect_stolen_block_is_ordered(*this, fixed, 1000, 4);
}

TEST_F(ordering_test, UntouchedPoolMemoryNeedsNoWait)
{
  pool_mr pool{&up.cuda, 2 * MiB, std::nullopt, up.rt};
  void* p = pool.allocate(MiB, a);
  up.rt.enqueue(a);
  pool.deallocate(p, MiB, a);
  void* q = pool.allocate(MiB, b);  // the other half of the pool, free of any stream
  EXPECT_NE(q, p);
  EXPECT_FALSE(new_work_waits(b));
  EXPECT_EQ(up.rt.calls().stream_wait_event, 0U);
  up.rt.complete_all();
  pool.deallocate(q, MiB, b);
}

TEST_F(ordering_test, WhenNothingFitsStreamsAreSynchronizedAndMergedBeforeGrowing)
{
  pool_mr pool{&up.cuda, 2 * MiB, std::nullopt, up.rt};
  void* x = pool.allocate(MiB, a);
  void* y = pool.allocate(MiB, b);
  up.rt.enqueue(a);
  up.rt.enqueue(b);
  pool.deallocate(x, MiB, a);
  pool.deallocate(y, MiB, b);
  auto const c      = up.rt.create_stream();
  auto const before = up.rt.calls();
  void* z           = pool.allocate(2 * MiB, c);  // no single list fits; together they coalesce
  EXPECT_EQ(pool.pool_size(), 2 * MiB) << "grew instead of reclaiming";
  EXPECT_GT(up.rt.calls().synchronize, before.synchronize);
  EXPECT_EQ(up.rt.completed(a), up.rt.enqueued(a));
  EXPECT_EQ(up.rt.completed(b), up.rt.enqueued(b));
  pool.deallocate(z, 2 * MiB, c);
  pool.check_invariants();
}

TEST_F(ordering_test, AnotherThreadsPerThreadStreamIsReachedOnlyBehindASynchronization)
{
  pool_mr pool{&up.cuda, MiB, MiB, up.rt};
  std::promise<void*> freed;
  std::promise<void> taken;
  std::promise<bool> done_when_taken;
  std::thread owner{[&] {
    void* p = pool.allocate(MiB, cuda_stream_per_thread);
    up.rt.enqueue(cudaStreamPerThread);  // pending on this thread's default stream
    pool.deallocate(p, MiB, cuda_stream_per_thread);
    freed.set_value(p);
    taken.get_future().wait();
    done_when_taken.set_value(up.rt.completed(cudaStreamPerThread) ==
                              up.rt.enqueued(cudaStreamPerThread));
  }};
  void* p            = freed.get_future().get();
  auto const records = up.rt.calls().event_record;
  void* q            = pool.allocate(MiB, cuda_stream_per_thread);
  taken.set_value();
  EXPECT_EQ(q, p);
  EXPECT_TRUE(done_when_taken.get_future().get()) << "block reached another thread's stream early";
  EXPECT_EQ(up.rt.calls().event_record, records) << "recorded on a foreign per-thread stream";
  owner.join();
  pool.deallocate(q, MiB, cuda_stream_per_thread);
  pool.check_invariants();
}

TEST_F(ordering_test, OwnPerThreadStreamIsReusedAtOnce)
{
  pool_mr pool{&up.cuda, MiB, MiB, up.rt};
  void* p = pool.allocate(MiB, cuda_stream_per_thread);
  up.rt.enqueue(cudaStreamPerThread);
  pool.deallocate(p, MiB, cuda_stream_per_thread);
  auto const before = up.rt.calls();
  EXPECT_EQ(pool.allocate(MiB, cuda_stream_per_thread), p);
  EXPECT_EQ(up.rt.calls().synchronize, before.synchronize);
  pool.deallocate(p, MiB, cuda_stream_per_thread);
  up.rt.complete_all();
}

TEST_F(ordering_test, LegacyDefaultStreamIsOneStreamForAllThreads)
{
  pool_mr pool{&up.cuda, MiB, MiB, up.rt};
  void* p = pool.allocate(MiB, cuda_stream_default);
  up.rt.enqueue(cudaStream_t{});
  std::thread{[&] { pool.deallocate(p, MiB, cuda_stream_legacy); }}.join();
  auto const before = up.rt.calls();
  EXPECT_EQ(pool.allocate(MiB, cuda_stream_default), p);  // same stream: no wait
  EXPECT_EQ(up.rt.calls().stream_wait_event, before.stream_wait_event);
  pool.deallocate(p, MiB, cuda_stream_default);
  up.rt.complete_all();
}

}  // namespace
}  // namespace gpumem::test
