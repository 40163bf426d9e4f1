// paged_segments over the host stand-in: segments are address space only; back() maps exactly the
// pages a block touches, unback() frees them when no live block touches them; free pages are
// reused in place, kept within the slack, else moved (after the work queued before their free);
// capture pins freed pages and never waits; release, trim and the destructor give everything back;
// bad ranges are refused or reported; a failed back() changes nothing; invariants hold over a
// random walk whose device memory never exceeds (1 + slack) × the peak of live pages.
#include "suballocator_test_helpers.hpp"

#include <gpumem/mr/paged_segments.hpp>

#include <algorithm>
#include <atomic>
#include <thread>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace gpumem::test {
namespace {

using mr::paged_segments;

struct paged_segments_test : ::testing::Test {
  detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = 256 * MiB}};
  cudaStream_t a = rt.create_stream();
  cudaStream_t b = rt.create_stream();

  paged_segments make(double slack = 0.02)
  {
    return paged_segments{{.device = 0, .reserve_bytes = 1024 * MiB, .slack = slack}, rt};
  }
  void check(paged_segments const& seg)
  {
    seg.check_invariants();
    rt.check_invariants();
    EXPECT_EQ(rt.vmm_state().physical_bytes, seg.stats().backed_bytes);
    EXPECT_EQ(rt.vmm_state().mapped_bytes, seg.stats().backed_bytes);
  }
  bool mapped(void const* p, std::size_t n)
  {
    try {
      rt.vmm_check_mapped(p, n);
      return true;
    } catch (cuda_error const&) {
      return false;
    }
  }
  static char* at(void* s, std::size_t off) { return static_cast<char*>(s) + off; }
  /// A segment of 8 MiB whose first page a kernel on `a` used and then freed (on `a`).
  void* page_freed_after_work(paged_segments& seg)
  {
    void* s = seg.reserve_segment(8 * MiB);
    seg.back(s, 2 * MiB, a);
    rt.enqueue(a);  // a kernel still using the block
    seg.unback(s, 2 * MiB, a);
    return s;
  }
};

TEST_F(paged_segments_test, ASegmentIsAddressSpaceOnly)
{
  auto seg = make();
  void* s  = seg.reserve_segment(20 * MiB);
  EXPECT_EQ(rt.vmm_state().physical_bytes, 0U);
  auto const st = seg.stats();
  EXPECT_EQ(st.segments, 1U);
  EXPECT_EQ(st.segment_bytes, 20 * MiB);
  EXPECT_FALSE(mapped(s, 1));
  EXPECT_TRUE(seg.owns(s));
  check(seg);
  seg.release_segment(s, 20 * MiB);
  EXPECT_EQ(seg.stats().segments, 0U);
  check(seg);
}

TEST_F(paged_segments_test, BackMapsExactlyThePagesABlockTouches)
{
  auto seg = make();
  void* s  = seg.reserve_segment(20 * MiB);
  seg.back(at(s, 1 * MiB), 3 * MiB, a);  // pages 0 and 1
  EXPECT_TRUE(mapped(at(s, 1 * MiB), 3 * MiB));
  EXPECT_TRUE(mapped(s, 4 * MiB));
  EXPECT_FALSE(mapped(at(s, 4 * MiB), 1));
  EXPECT_TRUE(rt.vmm_accessible_by(s, 0));
  auto const st = seg.stats();
  EXPECT_EQ(st.backed_bytes, 4 * MiB);
  EXPECT_EQ(st.live_pages, 2U);
  EXPECT_EQ(st.created, 2U);
  check(seg);
}

TEST_F(paged_segments_test, APageStaysLiveWhileAnyBlockTouchesIt)
{
  auto seg = make();
  void* s  = seg.reserve_segment(4 * MiB);
  seg.back(s, 1 * MiB, a);
  seg.back(at(s, 1 * MiB), 512 * KiB, a);  // the same page
  EXPECT_EQ(seg.stats().created, 1U);
  seg.unback(s, 1 * MiB, a);
  EXPECT_EQ(seg.stats().live_pages, 1U);
  EXPECT_EQ(seg.stats().free_pages, 0U);
  seg.unback(at(s, 1 * MiB), 512 * KiB, a);
  EXPECT_EQ(seg.stats().live_pages, 0U);
  EXPECT_EQ(seg.stats().free_pages, 1U);
  EXPECT_TRUE(mapped(s, 2 * MiB)) << "a free page stays mapped while within the slack";
  check(seg);
}

TEST_F(paged_segments_test, AFreePageIsReusedInPlace)
{
  auto seg = make(0);
  void* s  = seg.reserve_segment(8 * MiB);
  seg.back(s, 4 * MiB, a);
  seg.unback(s, 4 * MiB, a);
  auto const before = rt.calls();
  seg.back(at(s, 2 * MiB), 2 * MiB, a);
  EXPECT_EQ(rt.calls().vmm_map, before.vmm_map);
  EXPECT_EQ(rt.calls().vmm_create, before.vmm_create);
  EXPECT_EQ(seg.stats().moved, 0U);
  check(seg);
}

TEST_F(paged_segments_test, BeyondTheSlackTheOldestFreePageMoves)
{
  auto seg = make(0);
  void* s  = seg.reserve_segment(16 * MiB);
  seg.back(s, 2 * MiB, a);               // page 0
  seg.back(at(s, 2 * MiB), 2 * MiB, a);  // page 1
  seg.unback(s, 2 * MiB, a);             // page 0 free first
  seg.unback(at(s, 2 * MiB), 2 * MiB, a);
  rt.complete_all();
  seg.back(at(s, 8 * MiB), 2 * MiB, a);  // page 4: takes page 0's memory
  auto const st = seg.stats();
  EXPECT_EQ(st.moved, 1U);
  EXPECT_EQ(st.created, 2U);
  EXPECT_EQ(st.backed_bytes, 4 * MiB);
  EXPECT_FALSE(mapped(s, 1));
  EXPECT_TRUE(mapped(at(s, 2 * MiB), 2 * MiB));
  EXPECT_TRUE(mapped(at(s, 8 * MiB), 2 * MiB));
  EXPECT_TRUE(rt.vmm_accessible_by(at(s, 8 * MiB), 0));
  check(seg);
}

TEST_F(paged_segments_test, PagesMovedSideBySideAreUnmappedInOneCallAndGrantedInOne)
{
  auto seg = make(0);
  void* s  = seg.reserve_segment(32 * MiB);
  seg.back(s, 8 * MiB, a);  // pages 0..3, freed together
  seg.unback(s, 8 * MiB, a);
  rt.complete_all();
  auto const before = rt.calls();
  seg.back(at(s, 16 * MiB), 8 * MiB, a);  // pages 8..11 take them
  auto const after = rt.calls();
  EXPECT_EQ(seg.stats().moved, 4U);
  EXPECT_EQ(after.vmm_unmap - before.vmm_unmap, 1U) << "one unmap for the run of four";
  EXPECT_EQ(after.vmm_map - before.vmm_map, 4U);
  EXPECT_EQ(after.vmm_create, before.vmm_create);
  EXPECT_TRUE(mapped(at(s, 16 * MiB), 8 * MiB));
  EXPECT_FALSE(mapped(s, 1));
  check(seg);
}

TEST_F(paged_segments_test, WithinTheSlackNewPagesAreMade)
{
  auto seg = make(0.5);
  void* s  = seg.reserve_segment(32 * MiB);
  seg.back(s, 8 * MiB, a);  // 4 pages live: the slack keeps 2 free
  seg.unback(s, 4 * MiB, a);
  rt.complete_all();
  seg.back(at(s, 16 * MiB), 2 * MiB, a);  // 2 free <= 0.5 * 4: made
  EXPECT_EQ(seg.stats().moved, 0U);
  EXPECT_EQ(seg.stats().created, 5U);
  seg.unback(at(s, 4 * MiB), 4 * MiB, a);  // 4 free > 0.5 * 4: the next one moves
  rt.complete_all();
  seg.back(at(s, 20 * MiB), 2 * MiB, a);
  EXPECT_EQ(seg.stats().moved, 1U);
  EXPECT_EQ(seg.stats().created, 5U);
  check(seg);
}

TEST_F(paged_segments_test, AMoveWaitsForTheWorkQueuedBeforeTheFree)
{
  auto seg = make(0);
  void* s  = page_freed_after_work(seg);
  rt.enqueue(a);  // later work on a, not the block's
  EXPECT_TRUE(mapped(s, 2 * MiB)) << "nothing unmapped at the free";
  seg.back(at(s, 4 * MiB), 2 * MiB, b);
  EXPECT_EQ(seg.stats().moved, 1U);
  EXPECT_EQ(seg.stats().waited, 1U);
  EXPECT_GE(rt.completed(a), 1U) << "the kernel before the free finished before the unmap";
  check(seg);
}

TEST_F(paged_segments_test, AMoveOfFinishedWorkDoesNotWait)
{
  auto seg = make(0);
  void* s  = page_freed_after_work(seg);
  rt.complete(a);
  rt.enqueue(a);  // new work: not waited for
  seg.back(at(s, 4 * MiB), 2 * MiB, b);
  EXPECT_EQ(seg.stats().moved, 1U);
  EXPECT_EQ(seg.stats().waited, 0U);
  EXPECT_EQ(rt.completed(a), 1U);
  check(seg);
}

TEST_F(paged_segments_test, PagesFreedWhileCapturingAreNeverMovedOrTrimmed)
{
  auto seg = make(0);
  void* s  = seg.reserve_segment(8 * MiB);
  seg.back(s, 2 * MiB, a);
  rt.begin_global_capture(a);
  seg.unback(s, 2 * MiB, a);
  seg.back(at(s, 4 * MiB), 2 * MiB, a);  // capturing: made, never moved, no wait
  EXPECT_EQ(seg.stats().moved, 0U);
  EXPECT_EQ(seg.stats().created, 2U);
  EXPECT_TRUE(rt.end_capture(a)) << "nothing the capture forbids was called";
  EXPECT_EQ(seg.trim(), 0U) << "the pinned page stays";
  EXPECT_TRUE(mapped(s, 2 * MiB));
  seg.back(s, 2 * MiB, a);  // taken in place
  EXPECT_EQ(seg.stats().free_pages, 0U);
  check(seg);
}

TEST_F(paged_segments_test, TrimReleasesFreePagesAndKeepsLiveOnes)
{
  auto seg = make(1.0);
  void* s  = seg.reserve_segment(16 * MiB);
  seg.back(s, 8 * MiB, a);
  seg.unback(s, 4 * MiB, a);
  rt.enqueue(a);
  EXPECT_EQ(seg.trim(), 4 * MiB);
  EXPECT_EQ(seg.stats().backed_bytes, 4 * MiB);
  EXPECT_TRUE(mapped(at(s, 4 * MiB), 4 * MiB));
  EXPECT_FALSE(mapped(s, 1));
  check(seg);
  seg.back(s, 2 * MiB, a);  // backed again on demand
  EXPECT_TRUE(mapped(s, 2 * MiB));
  check(seg);
}

TEST_F(paged_segments_test, ReleasingASegmentReleasesItsPagesAndItsAddressesServeAgain)
{
  auto seg = make();
  void* s1 = seg.reserve_segment(4 * MiB);
  void* s2 = seg.reserve_segment(4 * MiB);
  seg.back(s1, 4 * MiB, a);
  seg.back(s2, 2 * MiB, a);
  seg.unback(s1, 4 * MiB, a);
  seg.release_segment(s1, 4 * MiB);
  EXPECT_EQ(seg.stats().backed_bytes, 2 * MiB);
  EXPECT_FALSE(mapped(s1, 1));
  check(seg);
  void* s3 = seg.reserve_segment(4 * MiB);
  EXPECT_EQ(s3, s1) << "the lowest hole that fits";
  seg.unback(s2, 2 * MiB, a);
  seg.release_segment(s2, 4 * MiB);
  seg.release_segment(s3, 4 * MiB);
  void* big = seg.reserve_segment(8 * MiB);
  EXPECT_EQ(big, s1) << "neighbouring holes joined";
  check(seg);
}

TEST_F(paged_segments_test, BadRangesAreRefusedOrReportedAndChangeNothing)
{
  auto seg = make();
  void* s  = seg.reserve_segment(4 * MiB);
  EXPECT_THROW(seg.back(at(s, 2 * MiB), 4 * MiB, a), logic_error) << "past the segment's end";
  EXPECT_THROW(seg.back(at(s, 8 * MiB), 1, a), logic_error) << "in no segment";
  EXPECT_THROW(seg.back(s, 0, a), logic_error);
  int host{};
  EXPECT_THROW(seg.back(&host, 4, a), logic_error);
  EXPECT_THROW(static_cast<void>(seg.reserve_segment(0)), logic_error);
  EXPECT_THROW(static_cast<void>(seg.reserve_segment(2048 * MiB)), out_of_memory);
  seg.unback(s, 4 * MiB, a);                     // no live block: reported, ignored
  seg.unback(&host, 4, a);                       // foreign: reported, ignored
  seg.release_segment(&host, 4);                 // foreign: reported, ignored
  seg.release_segment(at(s, 2 * MiB), 2 * MiB);  // not a segment's start
  EXPECT_EQ(seg.stats().segments, 1U);
  EXPECT_EQ(seg.stats().backed_bytes, 0U);
  check(seg);
  EXPECT_THROW((paged_segments{{.device = 0, .reserve_bytes = 3 * MiB}, rt}), logic_error);
  EXPECT_THROW((paged_segments{{.device = 0, .reserve_bytes = 64 * MiB, .slack = -1}, rt}),
               logic_error);
  EXPECT_THROW((paged_segments{{.device = -2, .reserve_bytes = 64 * MiB}, rt}), logic_error);
}

TEST(paged_segments_reserve, TheDefaultIsTwiceTheDevicesMemoryInWholePages)
{
  // 64.5 MiB of device memory: twice is 129 MiB, not a whole number of 2 MiB pages
  detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = 64 * MiB + 512 * KiB}};
  paged_segments seg{{.device = 0}, rt};
  void* s = seg.reserve_segment(130 * MiB);
  EXPECT_TRUE(seg.owns(static_cast<char*>(s) + 130 * MiB - 1));
  EXPECT_THROW(static_cast<void>(seg.reserve_segment(1)), out_of_memory);
  seg.release_segment(s, 130 * MiB);
}

TEST_F(paged_segments_test, AFailedBackChangesNothing)
{
  auto seg = make(0);
  void* s  = seg.reserve_segment(16 * MiB);
  seg.back(s, 2 * MiB, a);
  seg.unback(s, 2 * MiB, a);  // page 0 free, mapped
  rt.fail_next_allocations(1);
  // page 0 taken in place, then page 1 needs memory: a move is impossible (page 0 is taken), the
  // create fails
  EXPECT_THROW(seg.back(s, 4 * MiB, a), out_of_memory);
  auto st = seg.stats();
  EXPECT_EQ(st.live_pages, 0U);
  EXPECT_EQ(st.free_pages, 1U);
  EXPECT_EQ(st.backed_bytes, 2 * MiB);
  check(seg);
  rt.fail_next_maps(1);
  EXPECT_THROW(seg.back(at(s, 8 * MiB), 4 * MiB, a), cuda_error);
  check(seg);
  seg.back(s, 4 * MiB, a);  // serves once the device does
  EXPECT_TRUE(mapped(s, 4 * MiB));
  check(seg);
}

TEST_F(paged_segments_test, OutOfMemoryNamesWhatIsBacked)
{
  auto seg = make();
  void* s  = seg.reserve_segment(512 * MiB);
  try {
    seg.back(s, 300 * MiB, a);  // the device has 256 MiB
    FAIL() << "no out_of_memory";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find("backing 300"), std::string::npos) << what;
    EXPECT_NE(what.find("backed"), std::string::npos) << what;
  }
  EXPECT_EQ(seg.stats().backed_bytes, 0U);
  check(seg);
}

TEST_F(paged_segments_test, TheDestructorGivesEverythingBack)
{
  {
    auto seg = make();
    void* s  = seg.reserve_segment(16 * MiB);
    seg.back(s, 6 * MiB, a);
    seg.unback(s, 2 * MiB, a);
    rt.enqueue(a);
  }
  auto const v = rt.vmm_state();
  EXPECT_EQ(v.physical_bytes, 0U);
  EXPECT_EQ(v.mappings, 0U);
  EXPECT_EQ(v.reservations, 0U);
  EXPECT_EQ(rt.live_events(), 0U);
  rt.check_invariants();
}

// A random walk of blocks placed the way a caching allocator does (segments of several sizes,
// blocks anywhere in them, some sharing pages), on two streams: after every step the invariants
// hold and the device holds no more than (1 + slack) × the peak of live pages, plus one page.
TEST_F(paged_segments_test, RandomWalkKeepsInvariantsAndTheBound)
{
  for (double slack : {0.0, 0.05, 0.5}) {
    auto seg = make(slack);
    std::mt19937_64 rng{static_cast<std::uint64_t>(slack * 1000) + 7};
    std::vector<std::pair<void*, std::size_t>> segments;
    struct block {
      char* p;
      std::size_t n;
      cudaStream_t s;
    };
    std::vector<block> blocks;
    auto const granule = seg.stats().granularity;
    for (int step = 0; step < 3000; ++step) {
      auto const r = rng() % 100;
      if (segments.empty() || (r < 5 && segments.size() < 12)) {
        auto const n = (1 + rng() % 10) * granule;
        segments.emplace_back(seg.reserve_segment(n), n);
      } else if (r < 55 && blocks.size() < 40) {
        auto const& [s, n] = segments[rng() % segments.size()];
        auto const off     = (rng() % (n / 4096)) * 4096;
        auto const len     = 1 + rng() % std::min<std::size_t>(n - off, 3 * granule);
        auto const st      = rng() % 2 ? a : b;
        try {
          seg.back(static_cast<char*>(s) + off, len, st);
          blocks.push_back({static_cast<char*>(s) + off, len, st});
          rt.enqueue(st);
        } catch (out_of_memory const&) {  // the device is full: nothing changed
        }
      } else if (r < 95 && !blocks.empty()) {
        auto const i = rng() % blocks.size();
        seg.unback(blocks[i].p, blocks[i].n, blocks[i].s);
        blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(i));
      } else if (r < 97) {
        rt.complete(rng() % 2 ? a : b);
      } else if (r < 98) {
        static_cast<void>(seg.trim());
      } else if (segments.size() > 1) {  // a segment with no live block goes
        auto const i      = rng() % segments.size();
        auto const [s, n] = segments[i];
        bool const busy   = std::any_of(blocks.begin(), blocks.end(), [&](block const& x) {
          return x.p >= static_cast<char*>(s) && x.p < static_cast<char*>(s) + n;
        });
        if (!busy) {
          seg.release_segment(s, n);
          segments.erase(segments.begin() + static_cast<std::ptrdiff_t>(i));
        }
      }
      seg.check_invariants();
      auto const st = seg.stats();
      ASSERT_LE(static_cast<double>(st.backed_bytes / granule),
                (1 + slack) * static_cast<double>(st.peak_live_pages) + 1)
          << "step " << step << ", slack " << slack;
      for (auto const& x : blocks) { ASSERT_TRUE(mapped(x.p, x.n)) << "step " << step; }
    }
    check(seg);
    EXPECT_GT(seg.stats().moved, 0U) << "slack " << slack;
  }
}

}  // namespace
}  // namespace gpumem::test

namespace gpumem::test {
namespace {

// Threads backing and freeing blocks in segments of their own while another trims and reads the
// figures: pages move between the threads' segments under the one lock; every block stays mapped
// while live and the invariants hold at the end (run under TSan by the sanitizer stage).
TEST_F(paged_segments_test, ThreadsBackAndFreeWhileAnotherTrims)
{
  auto seg = make(0);
  rt.complete_all();
  constexpr int threads = 4;
  std::vector<void*> segments;
  for (int t = 0; t < threads; ++t) { segments.push_back(seg.reserve_segment(16 * MiB)); }
  std::atomic<bool> stop{false};
  std::atomic<int> unmapped_live{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng{static_cast<unsigned>(t)};
      auto* base = static_cast<char*>(segments[static_cast<std::size_t>(t)]);
      for (int i = 0; i < 400; ++i) {
        auto const off = (rng() % 6) * 2 * MiB;
        auto const len = (1 + rng() % 4) * MiB;
        seg.back(base + off, len, nullptr);
        if (!mapped(base + off, len)) { unmapped_live.fetch_add(1); }
        seg.unback(base + off, len, nullptr);
      }
    });
  }
  std::thread trimmer{[&] {
    while (!stop.load()) {
      static_cast<void>(seg.trim());
      static_cast<void>(seg.stats());
    }
  }};
  for (auto& w : workers) { w.join(); }
  stop.store(true);
  trimmer.join();
  EXPECT_EQ(unmapped_live.load(), 0);
  EXPECT_EQ(seg.stats().live_pages, 0U);
  check(seg);
}

}  // namespace
}  // namespace gpumem::test
