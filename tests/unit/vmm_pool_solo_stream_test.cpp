// vmm_pool while one stream alone uses it (solo mode): its frees join the idle list at once, so
// they coalesce with all free memory and need no device synchronization; another stream's first
// allocation ends solo mode with one synchronization; a growth never unmaps memory the device
// may still use. Over the host stand-in, streams driven by hand.
#include "suballocator_test_helpers.hpp"

#include <gpumem/detail/stream_capture.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <thread>

namespace gpumem::test {
namespace {

using vmm_pool = mr::vmm_pool_memory_resource;

struct vmm_pool_solo : ::testing::Test {
  detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = 64 * MiB}};
  cudaStream_t a = rt.create_stream();
  cudaStream_t b = rt.create_stream();
  vmm_pool pool{mr::vmm_pool_options{.reserve_bytes = 256 * MiB}, rt};

  /// 8 MiB freed on `a` while a's work still runs (a hole a growth could move elsewhere), next to
  /// 2 MiB still handed out (returned), so that the hole cannot grow in place.
  void* hole_beside_a_live_block()
  {
    void* p = pool.allocate(8 * MiB, a);
    void* q = pool.allocate(2 * MiB, a);
    rt.enqueue(a);
    pool.deallocate(p, 8 * MiB, a);
    hole = static_cast<char*>(p);
    return q;
  }
  /// True when [p, p + n) and the hole left by hole_beside_a_live_block() do not overlap.
  [[nodiscard]] bool outside_the_hole(void* p, std::size_t n) const
  {
    auto* const c = static_cast<char*>(p);
    return c + n <= hole || c >= hole + 8 * MiB;
  }
  char* hole{};

  void check()
  {
    pool.check_invariants();
    rt.check_invariants();
    EXPECT_EQ(rt.vmm_state().misuse_count, 0U);
  }
};

// p's free joins the idle tail of its granules: a request for all of them is a hit. With the
// free kept in the stream's own list instead, neither list could serve it without a reclaim,
// which synchronizes the device.
TEST_F(vmm_pool_solo, FreesOfTheOnlyStreamCoalesceWithTheIdleListWithoutASynchronization)
{
  void* p = pool.allocate(3 * MiB, a);  // 4 MiB mapped; 1 MiB of it is idle
  rt.enqueue(a);                        // work on `a` still uses p
  pool.deallocate(p, 3 * MiB, a);
  auto const syncs = rt.calls().synchronize;
  void* s          = pool.allocate(4 * MiB, a);
  EXPECT_EQ(rt.calls().synchronize, syncs);
  EXPECT_EQ(pool.stats().mapped_bytes, 4 * MiB) << "no growth";
  EXPECT_LT(rt.completed(a), rt.enqueued(a));
  pool.deallocate(s, 4 * MiB, a);
  check();
}

TEST_F(vmm_pool_solo, AnotherStreamsFirstAllocationWaitsForTheSoloStreamsFrees)
{
  void* p = pool.allocate(4 * MiB, a);
  rt.enqueue(a);
  pool.deallocate(p, 4 * MiB, a);
  void* q = pool.allocate(4 * MiB, b);  // ends solo mode: the device is synchronized first
  EXPECT_EQ(rt.completed(a), rt.enqueued(a)) << "b may get p only once a is past its free";
  rt.enqueue(a);
  pool.deallocate(q, 4 * MiB, a);  // solo mode is over: a's list, as for any stream
  auto const waits = rt.calls().stream_wait_event;
  void* r          = pool.allocate(4 * MiB, b);  // q only behind an event: b waits for a on the GPU
  EXPECT_EQ(r, q);
  EXPECT_EQ(rt.calls().stream_wait_event, waits + 1);
  EXPECT_LT(rt.completed(a), rt.enqueued(a)) << "no host synchronization";
  rt.complete_all();
  pool.deallocate(r, 4 * MiB, b);
  check();
}

// The device still runs work that may use p: the growth maps new memory instead of moving p's
// handles, and nobody waits for the device.
TEST_F(vmm_pool_solo, AGrowthWhileTheStreamIsBusyTakesNewMemoryAndMovesNothing)
{
  void* q           = hole_beside_a_live_block();
  auto const unmaps = rt.calls().vmm_unmap;
  auto const syncs  = rt.calls().synchronize;
  void* r           = pool.allocate(12 * MiB, a);
  EXPECT_EQ(rt.calls().vmm_unmap, unmaps) << "nothing moved";
  EXPECT_EQ(rt.calls().synchronize, syncs);
  EXPECT_LT(rt.completed(a), rt.enqueued(a)) << "the device was not waited for";
  // new memory for all of r and no more (busy_growth_percent is 0 by default)
  EXPECT_EQ(pool.stats().mapped_bytes, 22 * MiB);
  EXPECT_TRUE(outside_the_hole(r, 12 * MiB)) << "the device may still use the hole";
  rt.complete_all();
  pool.deallocate(q, 2 * MiB, a);
  pool.deallocate(r, 12 * MiB, a);
  check();
}

// Once the stream is done, a growth may move free memory (after a synchronization, which costs
// nothing on an idle device): the hole's handles are mapped where the new block needs them.
TEST_F(vmm_pool_solo, AGrowthAfterTheStreamIsDoneMovesFreeMemory)
{
  void* q = hole_beside_a_live_block();
  rt.complete_all();
  auto const unmaps = rt.calls().vmm_unmap;
  void* r           = pool.allocate(12 * MiB, a);
  EXPECT_GT(rt.calls().vmm_unmap, unmaps) << "the hole's handles moved";
  EXPECT_EQ(pool.stats().mapped_bytes, 14 * MiB);
  pool.deallocate(q, 2 * MiB, a);
  pool.deallocate(r, 12 * MiB, a);
  check();
}

// When new memory alone cannot serve (the device is short of it), the growth waits for the
// device and then moves the free memory it may use again.
TEST(vmm_pool_solo_busy, WhenNewMemoryIsNotEnoughTheGrowthWaitsAndMoves)
{
  detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = 24 * MiB}};
  auto const a = rt.create_stream();
  vmm_pool pool{mr::vmm_pool_options{.reserve_bytes = 256 * MiB}, rt};
  void* p = pool.allocate(8 * MiB, a);
  void* q = pool.allocate(2 * MiB, a);
  rt.enqueue(a);
  pool.deallocate(p, 8 * MiB, a);
  auto const unmaps = rt.calls().vmm_unmap;
  void* r           = pool.allocate(16 * MiB, a);  // new memory only would need 26 MiB
  EXPECT_EQ(rt.completed(a), rt.enqueued(a)) << "unmapped while the device used it";
  EXPECT_GT(rt.calls().vmm_unmap, unmaps);
  EXPECT_EQ(pool.stats().mapped_bytes, 18 * MiB);
  pool.deallocate(q, 2 * MiB, a);
  pool.deallocate(r, 16 * MiB, a);
  pool.check_invariants();
  rt.check_invariants();
  EXPECT_EQ(rt.vmm_state().misuse_count, 0U);
}

TEST_F(vmm_pool_solo, TrimWaitsForTheSoloStreamsFrees)
{
  void* p = pool.allocate(8 * MiB, a);
  rt.enqueue(a);
  pool.deallocate(p, 8 * MiB, a);
  EXPECT_EQ(pool.trim_to(0), 8 * MiB);
  EXPECT_EQ(rt.completed(a), rt.enqueued(a));
  check();
}

TEST_F(vmm_pool_solo, DuringACaptureAnotherStreamIsRefusedAndSoloModeGoesOn)
{
  void* p = pool.allocate(4 * MiB, a);
  rt.enqueue(a);
  pool.deallocate(p, 4 * MiB, a);
  rt.begin_global_capture(a);
  EXPECT_THROW((void)pool.allocate(4 * MiB, b), cuda_error);  // cannot synchronize now
  EXPECT_FALSE(rt.end_capture(a)) << "the refused synchronization invalidated it, as in CUDA";
  void* q = pool.allocate(4 * MiB, b);  // works once the capture is over
  EXPECT_EQ(rt.completed(a), rt.enqueued(a));
  pool.deallocate(q, 4 * MiB, b);
  check();
}

// After solo mode, with every allocation on one host thread (a training loop with side streams),
// the first stream keeps solo mode's rules: its allocations take the idle list first and its frees
// go there at once. Another stream that takes such a free (its own list empty) waits for the first
// stream's queued work through an event: no synchronization.
TEST_F(vmm_pool_solo, AfterSoloModeTheFirstStreamsFreesStillJoinTheIdleList)
{
  void* x = pool.allocate(6 * MiB, a);
  pool.deallocate(x, 6 * MiB, a);       // solo: into the idle list
  void* w = pool.allocate(2 * MiB, b);  // ends solo mode
  void* y = pool.allocate(4 * MiB, a);  // the rest of the idle list
  rt.enqueue(a);                        // work on `a` still uses y
  pool.deallocate(y, 4 * MiB, a);       // into the idle list again
  auto const calls = rt.calls();
  void* z          = pool.allocate(4 * MiB, b);  // b's own list is empty: y's block, after a's work
  EXPECT_EQ(z, y);
  EXPECT_EQ(rt.calls().synchronize, calls.synchronize);
  EXPECT_EQ(rt.calls().event_record, calls.event_record + 1);
  EXPECT_EQ(rt.calls().stream_wait_event, calls.stream_wait_event + 1);
  EXPECT_EQ(pool.stats().mapped_bytes, 6 * MiB) << "no growth";
  rt.complete_all();
  pool.deallocate(z, 4 * MiB, b);
  pool.deallocate(w, 2 * MiB, b);
  check();
}

// The other streams of that thread take their own list first: b's recurring block (the next
// batch) reuses its last one and leaves the idle holes to the first stream. With the idle list
// first for them too, their blocks took those holes and the first stream's went elsewhere: the
// recorded three-stream training trace held 1.052x its live bytes, 1.026x this way
// (vmm_pool_recorded.ASideStreamTakesItsOwnListFirstAndTheFirstStreamFreesToTheIdleList).
TEST_F(vmm_pool_solo, AfterSoloModeTheOtherStreamsOfOneThreadTakeTheirOwnListFirst)
{
  void* x = pool.allocate(6 * MiB, a);
  pool.deallocate(x, 6 * MiB, a);       // solo: into the idle list
  void* y = pool.allocate(2 * MiB, b);  // ends solo mode; served from the idle list
  pool.deallocate(y, 2 * MiB, b);       // b's own list
  void* z = pool.allocate(2 * MiB, b);
  EXPECT_EQ(z, y) << "served from b's own list";
  EXPECT_EQ(pool.stats().mapped_bytes, 6 * MiB) << "no growth";
  pool.deallocate(z, 2 * MiB, b);
  check();
}

// b's free stays in b's list (b's next allocation would reuse it with no call); the first stream's
// next allocation hands it over to the idle list, where it joins the free memory beside it, and
// orders `a` after b's work on it (an event recorded on b, waited on by a: no synchronization).
// With b's frees left in its list until a reclaim, the recorded three-stream trace's warm passes
// moved handles and synchronized the device at every step of its peak shape
// (vmm_pool_recorded.TheWarmPassesOfAThreeStreamTraceMoveNoHandleAndNeverSynchronize).
TEST_F(vmm_pool_solo, AfterSoloModeTheFirstStreamsNextAllocationTakesTheOtherStreamsFrees)
{
  void* x = pool.allocate(6 * MiB, a);
  pool.deallocate(x, 6 * MiB, a);       // solo: into the idle list
  void* y = pool.allocate(2 * MiB, b);  // ends solo mode: the idle list's high end
  void* w = pool.allocate(4 * MiB, a);  // the rest of the idle list
  rt.enqueue(b);                        // work on b still uses y
  pool.deallocate(y, 2 * MiB, b);       // b's own list
  auto const calls = rt.calls();
  void* z = pool.allocate(2 * MiB, a);  // the idle list is empty: y's block, after b's work
  EXPECT_EQ(z, y);
  EXPECT_EQ(rt.calls().synchronize, calls.synchronize);
  EXPECT_EQ(rt.calls().event_record, calls.event_record + 1);
  EXPECT_EQ(rt.calls().stream_wait_event, calls.stream_wait_event + 1);
  EXPECT_EQ(pool.stats().mapped_bytes, 6 * MiB) << "no growth";
  rt.enqueue(a);
  rt.complete(a);
  EXPECT_LT(rt.completed(a), rt.enqueued(a)) << "a may use y's block before b's work is done";
  rt.complete_all();
  pool.deallocate(z, 2 * MiB, a);
  pool.deallocate(w, 4 * MiB, a);
  auto const before = rt.calls();
  void* v           = pool.allocate(6 * MiB, a);  // the handed-over block coalesced with the rest
  EXPECT_EQ(rt.calls().synchronize, before.synchronize);
  EXPECT_EQ(pool.stats().mapped_bytes, 6 * MiB) << "no growth";
  pool.deallocate(v, 6 * MiB, a);
  check();
}

// While the first stream is being captured into a CUDA graph, nothing is handed over: an event
// recorded outside the capture cannot be waited on inside it (CUDA refuses, and the capture
// breaks). b's block stays in b's list, and the capture stays valid.
TEST_F(vmm_pool_solo, DuringACaptureOfTheFirstStreamNothingIsHandedOver)
{
  void* x = pool.allocate(6 * MiB, a);
  pool.deallocate(x, 6 * MiB, a);
  void* y = pool.allocate(2 * MiB, b);  // ends solo mode
  void* w = pool.allocate(2 * MiB, a);
  pool.deallocate(y, 2 * MiB, b);  // b's own list
  auto const calls = rt.calls();
  rt.begin_global_capture(a);
  void* z = pool.allocate(2 * MiB, a);  // the idle list's last 2 MiB: no call
  EXPECT_EQ(rt.calls().event_record, calls.event_record);
  EXPECT_EQ(rt.calls().stream_wait_event, calls.stream_wait_event);
  EXPECT_TRUE(rt.end_capture(a)) << "the allocation broke the capture";
  EXPECT_NE(z, y);
  EXPECT_EQ(pool.allocate(2 * MiB, b), y) << "still in b's list";
  pool.deallocate(y, 2 * MiB, b);
  pool.deallocate(z, 2 * MiB, a);
  pool.deallocate(w, 2 * MiB, a);
  check();
}

// The same when the first stream is the legacy default stream and another stream is captured: a
// global-mode capture forbids any event record or wait on the legacy stream.
TEST_F(vmm_pool_solo, DuringACaptureTheLegacyFirstStreamTakesNothingOver)
{
  cudaStream_t const legacy{};
  void* x = pool.allocate(6 * MiB, legacy);
  pool.deallocate(x, 6 * MiB, legacy);
  void* y = pool.allocate(2 * MiB, b);  // ends solo mode
  void* w = pool.allocate(2 * MiB, legacy);
  pool.deallocate(y, 2 * MiB, b);
  rt.begin_global_capture(a);
  void* z = nullptr;
  EXPECT_NO_THROW(z = pool.allocate(2 * MiB, legacy));
  EXPECT_TRUE(rt.end_capture(a)) << "the allocation broke the capture";
  EXPECT_NE(z, y);
  if (z != nullptr) { pool.deallocate(z, 2 * MiB, legacy); }
  pool.deallocate(w, 2 * MiB, legacy);
  check();
}

// Once another host thread allocates, each stream's own list comes first again (the idle list's
// lock would be contended by every thread on every allocation).
TEST_F(vmm_pool_solo, AfterSoloModeASecondThreadMakesEachStreamsOwnListComeFirst)
{
  void* x = pool.allocate(6 * MiB, a);
  pool.deallocate(x, 6 * MiB, a);
  void* y = pool.allocate(2 * MiB, b);
  pool.deallocate(y, 2 * MiB, b);
  void* w = nullptr;
  std::thread other{[&] { w = pool.allocate(2 * MiB, a); }};
  other.join();
  void* z = pool.allocate(2 * MiB, b);
  EXPECT_EQ(z, y) << "b's own list first";
  pool.deallocate(z, 2 * MiB, b);
  pool.deallocate(w, 2 * MiB, a);
  check();
}

}  // namespace
}  // namespace gpumem::test
