// White-box tests of fixed_size_memory_resource over the host stand-in: defaults, growth by the
// preallocation count, rejection of large requests, bad input.
#include "suballocator_test_helpers.hpp"

#include <gpumem/mr/fixed_size_memory_resource.hpp>

#include <set>
#include <vector>

namespace gpumem::test {
namespace {

using fixed_mr = mr::fixed_size_memory_resource<mr::cuda_memory_resource>;

TEST(fixed_size, DefaultsAreOneMiBTimes128)
{
  host_upstream up{false};  // simulated memory: nothing is touched
  fixed_mr fixed{&up.cuda, fixed_mr::default_block_size, fixed_mr::default_blocks_to_preallocate,
                 up.rt};
  EXPECT_EQ(fixed_mr::default_block_size, MiB);
  EXPECT_EQ(fixed_mr::default_blocks_to_preallocate, 128U);
  EXPECT_EQ(fixed.get_block_size(), MiB);
  EXPECT_EQ(fixed.pool_size(), 128 * MiB);
  EXPECT_TRUE(fixed.get_upstream_resource() == device_async_resource_ref{up.cuda});
}

TEST(fixed_size, GrowsByThePreallocationCountWhenAllBlocksAreOut)
{
  host_upstream up{false};
  fixed_mr fixed{&up.cuda, 4 * KiB, 8, up.rt};
  std::set<void*> ptrs;
  for (int i = 0; i < 9; ++i) { ptrs.insert(fixed.allocate(100 * (i + 1))); }
  EXPECT_EQ(ptrs.size(), 9U);
  EXPECT_EQ(fixed.pool_size(), 16 * 4 * KiB);
  EXPECT_EQ(up.rt.live_allocations(), 2U);
  fixed.check_invariants();
  for (void* p : ptrs) { fixed.deallocate(p, 4 * KiB); }
  fixed.check_invariants();
  EXPECT_EQ(fixed.get_free_stats().free_bytes, 16 * 4 * KiB);
}

struct fixed_size_two_streams : ::testing::Test {
  host_upstream up;
  cudaStream_t a = up.rt.create_stream();
  cudaStream_t b = up.rt.create_stream();
};

// A stream that runs dry steals from another stream's list: one event orders it after all that
// stream's frees, so it takes half of that list with the block it needs, and the next allocations
// are hits with no runtime call; the donor keeps the other half.
TEST_F(fixed_size_two_streams, AStealTakesHalfOfTheOtherStreamsBlocksBehindOneEvent)
{
  fixed_mr fixed{&up.cuda, 4 * KiB, 9, up.rt};
  std::vector<void*> ptrs;
  for (int i = 0; i < 9; ++i) { ptrs.push_back(fixed.allocate(4 * KiB, a)); }
  up.rt.enqueue(a);  // work on a that uses the blocks, still pending
  for (void* p : ptrs) { fixed.deallocate(p, 4 * KiB, a); }

  auto const before = up.rt.calls();
  std::set<void*> on_b{fixed.allocate(4 * KiB, b)};  // steals 1 + half of the other 8
  EXPECT_EQ(up.rt.calls().event_record, before.event_record + 1);
  EXPECT_EQ(up.rt.calls().stream_wait_event, before.stream_wait_event + 1);
  for (int i = 0; i < 4; ++i) { on_b.insert(fixed.allocate(4 * KiB, b)); }
  EXPECT_EQ(up.rt.calls().event_record, before.event_record + 1) << "b's next 4 are hits";
  EXPECT_EQ(on_b.size(), 5U);
  std::set<void*> on_a;
  for (int i = 0; i < 4; ++i) { on_a.insert(fixed.allocate(4 * KiB, a)); }
  EXPECT_EQ(up.rt.calls().event_record, before.event_record + 1) << "a kept 4 blocks";
  for (void* p : on_a) { EXPECT_EQ(on_b.count(p), 0U); }
  EXPECT_EQ(fixed.pool_size(), 9 * 4 * KiB) << "no growth";
  fixed.check_invariants();
  for (void* p : on_a) { fixed.deallocate(p, 4 * KiB, a); }
  for (void* p : on_b) { fixed.deallocate(p, 4 * KiB, b); }
  fixed.check_invariants();
  EXPECT_EQ(fixed.get_free_stats().free_bytes, 9 * 4 * KiB);
  up.rt.complete_all();
}

// A stream holding only a few free blocks keeps them: a dry stream grows the pool (one upstream
// allocation) rather than take them behind an event (driver calls that many threads contend for,
// leaving the donor as short as the thief).
TEST_F(fixed_size_two_streams, AStreamWithFewBlocksKeepsThemAndADryStreamGrows)
{
  fixed_mr fixed{&up.cuda, 4 * KiB, 4, up.rt};
  std::vector<void*> on_b;
  for (int i = 0; i < 4; ++i) { on_b.push_back(fixed.allocate(4 * KiB, b)); }
  for (int i = 0; i < 3; ++i) { fixed.deallocate(on_b[i], 4 * KiB, b); }  // b keeps 3 free
  auto const before = up.rt.calls();
  void* p           = fixed.allocate(4 * KiB, a);
  EXPECT_EQ(up.rt.calls().event_record, before.event_record) << "no steal";
  EXPECT_EQ(up.rt.calls().synchronize, before.synchronize) << "no reclaim";
  EXPECT_EQ(fixed.pool_size(), 8 * 4 * KiB) << "grown by the preallocation count";
  EXPECT_EQ(fixed.allocate(4 * KiB, b), on_b[2]) << "b's own blocks are still b's";
  fixed.check_invariants();
  fixed.deallocate(p, 4 * KiB, a);
  fixed.deallocate(on_b[2], 4 * KiB, b);
  fixed.deallocate(on_b[3], 4 * KiB, b);
  fixed.check_invariants();
}

// When the upstream cannot give a chunk, the few blocks other streams hold are reclaimed (a device
// synchronization) and serve the request.
TEST_F(fixed_size_two_streams, WhenTheUpstreamIsOutTheFewBlocksOfOtherStreamsAreReclaimed)
{
  fixed_mr fixed{&up.cuda, 4 * KiB, 2, up.rt};
  void* p = fixed.allocate(4 * KiB, b);
  void* q = fixed.allocate(4 * KiB, b);
  up.rt.enqueue(b);
  fixed.deallocate(p, 4 * KiB, b);
  up.rt.fail_next_allocations(1);
  void* r = fixed.allocate(4 * KiB, a);
  EXPECT_EQ(r, p);
  EXPECT_EQ(up.rt.completed(b), up.rt.enqueued(b)) << "reused only after b's work";
  EXPECT_EQ(fixed.pool_size(), 2 * 4 * KiB);
  fixed.deallocate(r, 4 * KiB, a);
  fixed.deallocate(q, 4 * KiB, b);
  fixed.check_invariants();
}

TEST(fixed_size, RejectsRequestsLargerThanTheBlock)
{
  host_upstream up;
  fixed_mr fixed{&up.cuda, 1000, 4, up.rt};
  EXPECT_EQ(fixed.get_block_size(), 1024U);  // rounded up to 256
  void* p        = fixed.allocate(1024);
  auto const msg = message_of<out_of_memory>([&] { (void)fixed.allocate(1025); });
  EXPECT_NE(msg.find("larger than the block size"), std::string::npos) << msg;
  EXPECT_THROW((void)fixed.allocate(SIZE_MAX), std::bad_alloc);
  fixed.deallocate(p, 1024);
  fixed.check_invariants();
}

TEST(fixed_size, ConstructorRejectsBadArguments)
{
  host_upstream up;
  EXPECT_THROW(fixed_mr(&up.cuda, 0, 4, up.rt), gpumem::logic_error);
  EXPECT_THROW(fixed_mr(&up.cuda, MiB, 0, up.rt), gpumem::logic_error);
  EXPECT_THROW(fixed_mr(&up.cuda, MiB, SIZE_MAX / 1024, up.rt), gpumem::logic_error);
  EXPECT_THROW(fixed_mr(static_cast<mr::cuda_memory_resource*>(nullptr)), gpumem::logic_error);
  EXPECT_EQ(up.rt.live_allocations(), 0U);
}

TEST(fixed_size, UpstreamFailureOnGrowthIsDiagnosedAndRecoverable)
{
  host_upstream up;
  fixed_mr fixed{&up.cuda, 4 * KiB, 2, up.rt};
  void* p = fixed.allocate(4 * KiB);
  void* q = fixed.allocate(4 * KiB);
  up.rt.fail_next_allocations(1);
  auto const msg = message_of<out_of_memory>([&] { (void)fixed.allocate(4 * KiB); });
  EXPECT_NE(msg.find("cannot grow by 2 blocks"), std::string::npos) << msg;
  EXPECT_NE(msg.find("pool size 8.00 KiB"), std::string::npos) << msg;
  fixed.check_invariants();
  void* r = fixed.allocate(4 * KiB);
  EXPECT_EQ(fixed.pool_size(), 16 * KiB);
  for (void* x : {p, q, r}) { fixed.deallocate(x, 4 * KiB); }
  fixed.check_invariants();
}

TEST(fixed_size, DoubleAndForeignFreesAreReportedAndIgnored)
{
  host_upstream up;
  fixed_mr fixed{&up.cuda, 4 * KiB, 2, up.rt};
  void* p = fixed.allocate(4 * KiB);
  fixed.deallocate(p, 4 * KiB);
  fixed.deallocate(p, 4 * KiB);
  long local{};
  fixed.deallocate(&local, 8);
  EXPECT_EQ(fixed.bad_deallocations(), 2U);
  fixed.check_invariants();
  void* a = fixed.allocate(10);
  void* b = fixed.allocate(10);
  EXPECT_NE(a, b);  // the double free did not put the block in the list twice
  fixed.deallocate(a, 10);
  fixed.deallocate(b, 10);
}

// try_deallocate frees only what the resource handed out and says whether it did, reporting
// nothing for another pointer: binning asks each candidate bin once with it.
TEST(fixed_size, TryDeallocateFreesOnlyItsOwnBlocksAndReportsNothingElse)
{
  host_upstream up;
  fixed_mr fixed{&up.cuda, 4 * KiB, 2, up.rt};
  void* p = fixed.allocate(4 * KiB);
  long local{};
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(fixed.try_deallocate(&local, 8, cuda_stream_view{}));
  EXPECT_TRUE(fixed.try_deallocate(p, 4 * KiB, cuda_stream_view{}));
  EXPECT_FALSE(fixed.try_deallocate(p, 4 * KiB, cuda_stream_view{}));  // freed already
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(fixed.bad_deallocations(), 0U);
  fixed.check_invariants();
  EXPECT_EQ(fixed.allocate(4 * KiB), p);  // back in the list
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(fixed.try_deallocate(p, 8 * KiB, cuda_stream_view{}));  // its own, wrong size
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("size differs"), std::string::npos);
  EXPECT_EQ(fixed.bad_deallocations(), 1U);
  fixed.check_invariants();
}

TEST(fixed_size, ReleasesEverythingUpstream)
{
  host_upstream up;
  {
    fixed_mr fixed{&up.cuda, 4 * KiB, 2, up.rt};
    for (int i = 0; i < 5; ++i) { (void)fixed.allocate(4 * KiB); }
  }
  EXPECT_EQ(up.rt.live_allocations(), 0U);
}

}  // namespace
}  // namespace gpumem::test
