// Pause and resume of vmm_pool_memory_resource over the host stand-in (backed: real bytes): the
// state machine, offload keeping every byte at every address, discard losing the contents, the
// typed error for allocations while paused, frees while paused, failures unwound (staging, copies,
// creates, maps), map and unmap listeners (order, outside the locks, allocating from the pool).
#include "vmm_pause_fixture.hpp"

#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <cstring>
#include <atomic>
#include <random>
#include <thread>
#include <utility>
#include <vector>

namespace gpumem::test {
namespace {

using vmm_pool = mr::vmm_pool_memory_resource;

struct vmm_pool_pause : vmm_pause_fixture {};

TEST_F(vmm_pool_pause, EveryTransitionOfTheStateMachine)
{
  auto pool = make();
  auto live = populate(pool);
  EXPECT_EQ(pool.state(), pause_state::active);
  EXPECT_FALSE(pool.resume());  // active: nothing to do
  check(pool);
  for (auto mode : {pause_mode::discard, pause_mode::offload}) {
    auto const paused =
        mode == pause_mode::discard ? pause_state::paused_discarded : pause_state::paused_offloaded;
    EXPECT_TRUE(pool.pause(mode));
    EXPECT_EQ(pool.state(), paused);
    check(pool);
    EXPECT_FALSE(pool.pause(pause_mode::discard));  // paused: nothing to do, whichever mode
    EXPECT_FALSE(pool.pause(pause_mode::offload));
    EXPECT_EQ(pool.state(), paused);
    EXPECT_TRUE(pool.resume());
    EXPECT_EQ(pool.state(), pause_state::active);
    EXPECT_FALSE(pool.resume());
    check(pool);
  }
  auto const s = pool.stats();
  EXPECT_EQ(s.pauses, 2U);
  EXPECT_EQ(s.resumes, 2U);
  EXPECT_GT(s.pause_seconds, 0.0);
  EXPECT_GT(s.resume_seconds, 0.0);
  release(pool, live);
  check(pool);
}

TEST_F(vmm_pool_pause, OffloadGivesTheMemoryBackAndRestoresEveryByteAtTheSameAddresses)
{
  auto pool         = make();
  auto live         = populate(pool);
  auto const before = pool.stats();
  auto const layout = pool.pool_size();
  ASSERT_GT(before.mapped_bytes, 0U);
  ASSERT_TRUE(pool.pause(pause_mode::offload));
  EXPECT_EQ(rt.vmm_state().physical_bytes, 0U);
  EXPECT_EQ(rt.vmm_state().mappings, 0U);
  EXPECT_EQ(rt.vmm_state().reservations, 1U);  // the addresses stay reserved
  EXPECT_THROW(rt.vmm_check_mapped(live[0].p, 1), cuda_error);
  auto const paused = pool.stats();
  EXPECT_EQ(paused.mapped_bytes, 0U);
  EXPECT_EQ(paused.paused_bytes, before.mapped_bytes);
  EXPECT_EQ(paused.handles, 0U);
  EXPECT_GE(paused.staging_bytes, before.mapped_bytes);
  EXPECT_EQ(pool.pool_size(), layout);  // the blocks keep their bookkeeping
  check(pool);
  ASSERT_TRUE(pool.resume());
  expect_intact(live);  // the same pointers, the same bytes
  auto const after = pool.stats();
  EXPECT_EQ(after.mapped_bytes, before.mapped_bytes);
  EXPECT_EQ(after.handles, before.handles);
  EXPECT_EQ(after.paused_bytes, 0U);
  EXPECT_EQ(after.staging_bytes, 0U);  // freed: keep_offload_staging is off
  EXPECT_EQ(rt.vmm_state().physical_bytes, before.mapped_bytes);
  check(pool);
  release(pool, live);
  check(pool);
}

TEST_F(vmm_pool_pause, AWritePastAPauseThroughAnOldPointerIsReadBackAfterTheNextOne)
{
  auto pool = make({.keep_offload_staging = true});
  auto* p   = static_cast<unsigned char*>(pool.allocate(9 * MiB, a));
  for (int round = 0; round < 3; ++round) {
    p[round * MiB] = static_cast<unsigned char>(0x40 + round);
    ASSERT_TRUE(pool.pause(pause_mode::offload));
    EXPECT_GE(pool.stats().staging_bytes, 9 * MiB);
    ASSERT_TRUE(pool.resume());
    EXPECT_GE(pool.stats().staging_bytes, 9 * MiB);  // kept for the next pause
    for (int r = 0; r <= round; ++r) { EXPECT_EQ(p[r * MiB], 0x40 + r); }
  }
  pool.deallocate(p, 9 * MiB, a);
  check(pool);
}

// trim() (empty_cache) frees the kept staging buffer, but never one that holds a pause's contents.
TEST_F(vmm_pool_pause, TrimFreesTheKeptStagingButNotAPausesContents)
{
  auto pool = make({.keep_offload_staging = true});
  auto* p   = static_cast<unsigned char*>(pool.allocate(9 * MiB, a));
  p[MiB]    = 0x5a;
  ASSERT_TRUE(pool.pause(pause_mode::offload));
  pool.trim();  // paused: the buffer holds the contents
  EXPECT_GE(pool.stats().staging_bytes, 9 * MiB);
  EXPECT_EQ(pool.release_offload_staging(), 0U);
  ASSERT_TRUE(pool.resume());
  EXPECT_EQ(p[MiB], 0x5a);
  EXPECT_GE(pool.stats().staging_bytes, 9 * MiB);  // kept for the next pause
  pool.trim();
  EXPECT_EQ(pool.stats().staging_bytes, 0U);
  EXPECT_EQ(pool.release_offload_staging(), 0U);  // nothing left to free
  p[2 * MiB] = 0x6b;
  ASSERT_TRUE(pool.pause(pause_mode::offload));  // pins a new buffer
  ASSERT_TRUE(pool.resume());
  EXPECT_EQ(p[MiB], 0x5a);
  EXPECT_EQ(p[2 * MiB], 0x6b);
  EXPECT_GT(pool.release_offload_staging(), 0U);
  EXPECT_EQ(pool.stats().staging_bytes, 0U);
  pool.deallocate(p, 9 * MiB, a);
  check(pool);
}

// The host stand-in gives a new handle fresh (zeroed) memory; on a GPU its contents are undefined.
TEST_F(vmm_pool_pause, DiscardLosesTheContentsButKeepsTheAddresses)
{
  auto pool = make();
  auto live = populate(pool);
  ASSERT_TRUE(pool.pause(pause_mode::discard));
  EXPECT_EQ(pool.stats().staging_bytes, 0U);  // nothing copied
  EXPECT_EQ(rt.calls().memcpy, 0U);
  EXPECT_EQ(rt.vmm_state().physical_bytes, 0U);
  ASSERT_TRUE(pool.resume());
  for (std::size_t i = 0; i < live.size(); ++i) {
    rt.vmm_check_mapped(live[i].p, live[i].n);  // mapped again at the same address
    EXPECT_FALSE(holds(live[i].p, live[i].n, static_cast<unsigned>(i + 1))) << "block " << i;
    fill(live[i].p, live[i].n, static_cast<unsigned>(i + 1));  // and usable
  }
  expect_intact(live);
  release(pool, live);
  check(pool);
}

TEST_F(vmm_pool_pause, ARunOfAdjacentHandlesIsUnmappedWithOneCall)
{
  auto pool          = make();
  auto live          = populate(pool);
  auto const handles = pool.stats().handles;
  ASSERT_GT(handles, 4U);
  auto const before = rt.calls();
  ASSERT_TRUE(pool.pause(pause_mode::discard));
  EXPECT_EQ(rt.calls().vmm_unmap - before.vmm_unmap, 1U);  // the layout is one run
  EXPECT_EQ(rt.calls().vmm_release - before.vmm_release, handles);
  ASSERT_TRUE(pool.resume());
  EXPECT_EQ(rt.calls().vmm_create - before.vmm_create, handles);
  // The model refuses a range that is not exactly whole adjacent mappings.
  auto const [base, n] = pool.reserved_range();
  EXPECT_FALSE(rt.vmm_unmap_run(static_cast<char*>(base) + rt.vmm_granularity(0), 2 * MiB));
  EXPECT_FALSE(rt.vmm_unmap_run(base, n));
  release(pool, live);
  check(pool);
}

TEST_F(vmm_pool_pause, AllocatingWhilePausedThrowsPausedErrorAndResumeServesAgain)
{
  auto pool = make();
  void* p   = pool.allocate(MiB, a);
  pool.deallocate(p, MiB, a);  // free memory that a hit would find
  ASSERT_TRUE(pool.pause(pause_mode::discard));
  try {
    (void)pool.allocate(MiB, a);
    FAIL() << "allocated from a paused pool";
  } catch (paused_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("resume()"), std::string::npos) << e.what();
    EXPECT_NE(std::string{e.what()}.find("1.00 MiB"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)pool.allocate(64 * MiB, a), paused_error);  // a growth too
  EXPECT_THROW((void)pool.allocate_single_handle(MiB, a), paused_error);
  EXPECT_EQ(rt.vmm_state().physical_bytes, 0U);
  check(pool);
  ASSERT_TRUE(pool.resume());
  void* q = pool.allocate(MiB, a);
  EXPECT_EQ(q, p);  // the same free block
  pool.deallocate(q, MiB, a);
  check(pool);
}

TEST_F(vmm_pool_pause, FreesWhilePausedAreBookkeepingOnly)
{
  auto pool = make();
  auto live = populate(pool);
  ASSERT_TRUE(pool.pause(pause_mode::offload));
  auto const calls = rt.calls();
  release(pool, live);             // no runtime call
  EXPECT_EQ(pool.trim_to(0), 0U);  // nothing mapped to trim; no runtime call either
  EXPECT_EQ(rt.calls().vmm_unmap, calls.vmm_unmap);
  EXPECT_EQ(rt.calls().vmm_map, calls.vmm_map);
  EXPECT_EQ(rt.calls().synchronize, calls.synchronize);
  EXPECT_EQ(pool.bad_deallocations(), 0U);
  check(pool);
  ASSERT_TRUE(pool.resume());
  auto const creates = rt.calls().vmm_create;
  void* big          = pool.allocate(pool.pool_size(), a);  // everything is free and mapped
  EXPECT_EQ(rt.calls().vmm_create, creates);
  pool.deallocate(big, pool.pool_size(), a);
  check(pool);
}

TEST_F(vmm_pool_pause, APauseGivesFreeHandlesBackForGoodAndResumeMapsOnlyTheOthers)
{
  auto pool  = make();
  void* gone = pool.allocate(12 * MiB, a);  // three whole handles, freed before the pause
  auto live  = populate(pool);
  pool.deallocate(gone, 12 * MiB, a);
  auto const before = pool.stats();
  ASSERT_TRUE(pool.pause(pause_mode::offload));
  auto const paused = pool.stats();
  EXPECT_LE(paused.paused_bytes + 12 * MiB, before.mapped_bytes);  // not offloaded, not kept
  EXPECT_LE(paused.staging_bytes + 12 * MiB, before.mapped_bytes);
  ASSERT_TRUE(pool.resume());
  expect_intact(live);
  EXPECT_EQ(pool.stats().mapped_bytes, paused.paused_bytes);
  EXPECT_EQ(rt.vmm_state().physical_bytes, paused.paused_bytes);
  check(pool);
  release(pool, live);
  check(pool);
}

TEST_F(vmm_pool_pause, WeightsReplacedBySlightlyLargerOnesStrandNothingAcrossAPause)
{
  // An engine loads N weights, loads N slightly larger replacements, frees the originals, sleeps
  // and wakes: once the originals are gone, what the pool holds stays within 5 % of what is live.
  auto pool               = make();
  constexpr std::size_t n = 8;
  std::vector<block> originals;
  std::vector<block> replacements;
  for (std::size_t i = 0; i < n; ++i) { originals.push_back({pool.allocate(4 * MiB, a), 4 * MiB}); }
  for (std::size_t i = 0; i < n; ++i) {
    replacements.push_back({pool.allocate(4 * MiB + 64 * 1024, a), 4 * MiB + 64 * 1024});
    fill(replacements.back().p, replacements.back().n, static_cast<unsigned>(i + 1));
  }
  release(pool, originals);
  std::size_t const live = n * (4 * MiB + 64 * 1024);
  ASSERT_TRUE(pool.pause(pause_mode::offload));
  EXPECT_LE(static_cast<double>(pool.stats().paused_bytes), 1.05 * static_cast<double>(live));
  EXPECT_EQ(rt.vmm_state().physical_bytes, 0U);
  ASSERT_TRUE(pool.resume());
  expect_intact(replacements);
  EXPECT_LE(static_cast<double>(rt.vmm_state().physical_bytes), 1.05 * static_cast<double>(live));
  check(pool);
  release(pool, replacements);
  check(pool);
}

TEST_F(vmm_pool_pause, NoPinnedMemoryForTheOffloadChangesNothing)
{
  auto pool = make();
  auto live = populate(pool);
  rt.fail_next_allocations(1);
  EXPECT_THROW(pool.pause(pause_mode::offload), out_of_memory);
  EXPECT_EQ(pool.state(), pause_state::active);
  expect_intact(live);
  check(pool);
  pool.deallocate(pool.allocate(MiB, a), MiB, a);  // serving still
  release(pool, live);
  check(pool);
}

// Offload copies and gives back up to 64 MiB of adjacent handles at a time: 300 MiB of blocks make
// several such chunks, so that a copy can fail after some were given back.
TEST_F(vmm_pool_pause, AFailedCopyPutsBackWhatWasGivenBack)
{
  detail::host_runtime big{detail::host_runtime_options{.capacity_bytes = 1024 * MiB}};
  for (std::size_t skip : {0, 1, 3}) {  // before anything is given back, after some
    vmm_pool pool{mr::vmm_pool_options{.reserve_bytes = 512 * MiB, .handle_bytes = 16 * MiB}, big};
    std::vector<block> live;
    for (unsigned i = 0; i < 6; ++i) {
      live.push_back({pool.allocate(50 * MiB), 50 * MiB});
      fill(live.back().p, 50 * MiB, i + 1);
    }
    auto const copies = big.calls().memcpy;
    big.fail_next_copies(1, skip);
    EXPECT_THROW(pool.pause(pause_mode::offload), cuda_error) << "skip " << skip;
    EXPECT_EQ(pool.state(), pause_state::active);
    for (unsigned i = 0; i < live.size(); ++i) {
      big.vmm_check_mapped(live[i].p, live[i].n);
      EXPECT_TRUE(holds(live[i].p, live[i].n, i + 1)) << "skip " << skip << " block " << i;
    }
    EXPECT_GT(big.calls().memcpy, copies + skip);  // the copies back, when some were given back
    pool.check_invariants();
    big.check_invariants();
    void* more = pool.allocate(MiB);  // serving again
    pool.deallocate(more, MiB);
    for (auto const& b : live) { pool.deallocate(b.p, b.n); }
  }
}

TEST_F(vmm_pool_pause, AResumeOutOfMemoryUnwindsAndStaysPausedWithItsContents)
{
  auto pool         = make();
  auto live         = populate(pool);
  auto const mapped = pool.stats().mapped_bytes;  // 36 MiB in 4 MiB handles
  ASSERT_TRUE(pool.pause(pause_mode::offload));
  // Another user takes memory while the pool sleeps: only some of its handles fit.
  auto const free_now = 128 * MiB - rt.used_bytes();
  auto const filler   = free_now - mapped / 2;
  void* other         = rt.allocate(detail::memory_kind::device, filler);
  EXPECT_THROW(pool.resume(), out_of_memory);
  EXPECT_EQ(pool.state(), pause_state::paused_offloaded);
  EXPECT_EQ(rt.vmm_state().physical_bytes, 0U);  // what it mapped was given back
  EXPECT_GT(rt.calls().vmm_map, 0U);
  EXPECT_THROW((void)pool.allocate(MiB, a), paused_error);
  check(pool);
  rt.fail_next_maps(1);  // a driver refusal unwinds as well
  EXPECT_THROW(pool.resume(), cuda_error);
  EXPECT_EQ(pool.state(), pause_state::paused_offloaded);
  check(pool);
  rt.free(detail::memory_kind::device, other);
  ASSERT_TRUE(pool.resume());
  expect_intact(live);
  EXPECT_EQ(pool.stats().resumes, 1U);
  check(pool);
  release(pool, live);
}

TEST_F(vmm_pool_pause, DestroyedWhilePausedGivesEverythingBack)
{
  for (auto mode : {pause_mode::discard, pause_mode::offload}) {
    {
      auto pool = make();
      auto live = populate(pool);
      ASSERT_TRUE(pool.pause(mode));
      (void)live;  // never freed: the destructor releases the pool's memory anyway
    }
    EXPECT_EQ(rt.vmm_state().reservations, 0U);
    EXPECT_EQ(rt.vmm_state().physical_bytes, 0U);
    EXPECT_EQ(rt.used_bytes(), 0U);  // the staging buffer too
    rt.check_invariants();
  }
}

TEST_F(vmm_pool_pause, AnEmptyPoolPausesAndResumes)
{
  auto pool = make();
  ASSERT_TRUE(pool.pause(pause_mode::offload));
  EXPECT_EQ(pool.state(), pause_state::paused_offloaded);
  check(pool);
  ASSERT_TRUE(pool.resume());
  pool.deallocate(pool.allocate(MiB, a), MiB, a);
  check(pool);
}

TEST_F(vmm_pool_pause, ThePoolsOtherMemoryAndOtherPoolsAreUntouched)
{
  auto one     = make();
  auto two     = make();
  auto in_one  = populate(one);
  auto in_two  = populate(two);
  auto const n = two.stats().mapped_bytes;
  ASSERT_TRUE(one.pause(pause_mode::discard));
  EXPECT_EQ(rt.vmm_state().physical_bytes, n);
  expect_intact(in_two);
  ASSERT_TRUE(one.resume());
  release(one, in_one);
  release(two, in_two);
  check(one);
  check(two);
}

// Threads allocate and free (never touching the memory: an allocation that races with a pause may
// get a block whose memory is being given back, as one made just before it) while the main thread
// pauses and resumes: the bookkeeping stays consistent and every pause gives everything back.
TEST_F(vmm_pool_pause, PauseAndResumeWhileOtherThreadsAllocateAndFree)
{
  auto pool = make();
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> refused{};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 gen{static_cast<unsigned>(t)};
      std::vector<std::pair<void*, std::size_t>> mine;
      while (!stop.load()) {
        if (mine.size() < 8 && gen() % 2 == 0) {
          auto const n = std::size_t{1} << (10 + gen() % 12);
          try {
            mine.emplace_back(pool.allocate(n, cudaStreamPerThread), n);
          } catch (paused_error const&) {
            refused.fetch_add(1);
          }
        } else if (!mine.empty()) {
          pool.deallocate(mine.back().first, mine.back().second, cudaStreamPerThread);
          mine.pop_back();
        }
      }
      for (auto const& [p, n] : mine) { pool.deallocate(p, n, cudaStreamPerThread); }
    });
  }
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(pool.pause(i % 2 == 0 ? pause_mode::discard : pause_mode::offload));
    EXPECT_EQ(rt.vmm_state().physical_bytes, 0U);
    std::this_thread::yield();
    ASSERT_TRUE(pool.resume());
  }
  stop.store(true);
  for (auto& th : threads) { th.join(); }
  EXPECT_EQ(pool.stats().pauses, 40U);
  check(pool);
}

// -- listeners --------------------------------------------------------------------------------

TEST_F(vmm_pool_pause, ListenersHearGrowthPauseAndResumeInOrder)
{
  auto pool = make();
  std::vector<std::string> heard;
  auto describe = [&](vmm_mapping_event const& e) {
    std::size_t sum = 0;
    for (auto h : e.handles) { sum += h != 0 ? 1 : 0; }
    EXPECT_EQ(sum, e.handles.size());
    return std::string{e.mapped ? "map " : "unmap "} + to_string(e.cause) + " " +
           std::to_string(e.bytes / MiB) + " " + std::to_string(e.handles.size());
  };
  auto const on_map = pool.add_map_listener([&](vmm_mapping_event const& e) {
    rt.vmm_check_mapped(e.ptr, e.bytes);  // after mapping: usable
    heard.push_back(describe(e));
  });
  pool.add_unmap_listener([&](vmm_mapping_event const& e) {
    if (e.cause == vmm_mapping_cause::pause) {
      rt.vmm_check_mapped(e.ptr, e.bytes);  // before unmapping: still there
    }
    heard.push_back(describe(e));
  });
  void* p = pool.allocate(6 * MiB, a);  // one growth: two handles
  ASSERT_TRUE(pool.pause(pause_mode::offload));
  ASSERT_TRUE(pool.resume());
  pool.deallocate(p, 6 * MiB, a);
  EXPECT_GT(pool.trim_to(0), 0U);
  std::vector<std::string> const want{"map growth 6 2", "unmap pause 6 2", "map resume 6 2",
                                      "unmap trim 4 1", "unmap trim 2 1"};
  EXPECT_EQ(heard, want);
  EXPECT_TRUE(pool.remove_listener(on_map));
  EXPECT_FALSE(pool.remove_listener(on_map));
  heard.clear();
  pool.deallocate(pool.allocate(MiB, a), MiB, a);
  EXPECT_TRUE(heard.empty());
  EXPECT_THROW(pool.add_map_listener({}), logic_error);
  check(pool);
}

TEST_F(vmm_pool_pause, ListenersRunOutsideTheLocksAndMayAllocateFromThePool)
{
  auto pool = make();
  std::vector<void*> taken;
  int depth = 0;
  pool.add_map_listener([&](vmm_mapping_event const&) {
    if (depth++ == 0) {
      pool.check_invariants();                 // takes the grow lock: would deadlock under it
      taken.push_back(pool.allocate(MiB, a));  // from the pool the event is about
      (void)pool.stats();
    }
    --depth;
  });
  std::size_t unmaps = 0;
  pool.add_unmap_listener([&](vmm_mapping_event const& e) {
    ++unmaps;
    pool.check_invariants();  // pause calls it outside its locks too
    if (e.cause == vmm_mapping_cause::pause) {
      EXPECT_THROW((void)pool.allocate(MiB, a), paused_error);  // refused, not a deadlock
    }
  });
  void* p = pool.allocate(5 * MiB, a);
  ASSERT_EQ(taken.size(), 1U);
  ASSERT_TRUE(pool.pause(pause_mode::discard));
  ASSERT_TRUE(pool.resume());  // the listener allocates again, from the resumed pool
  ASSERT_EQ(taken.size(), 2U);
  EXPECT_EQ(unmaps, 1U);  // the pause (one run of adjacent handles)
  for (void* t : taken) { pool.deallocate(t, MiB, a); }
  pool.deallocate(p, 5 * MiB, a);
  check(pool);
}

TEST_F(vmm_pool_pause, AListenerThatPausesOrResumesItsOwnPoolIsRefusedNotDeadlocked)
{
  auto pool = make();
  pool.add_unmap_listener([&](vmm_mapping_event const& e) {
    if (e.cause == vmm_mapping_cause::pause) { (void)pool.resume(); }
  });
  pool.add_map_listener([&](vmm_mapping_event const& e) {
    if (e.cause == vmm_mapping_cause::resume) { (void)pool.pause(pause_mode::discard); }
  });
  void* p = pool.allocate(MiB, a);
  ASSERT_TRUE(pool.pause(pause_mode::discard));
  ASSERT_TRUE(pool.resume());
  EXPECT_EQ(pool.stats().listener_failures, 2U);  // both refused with logic_error, and counted
  EXPECT_EQ(pool.state(), pause_state::active);
  pool.deallocate(p, MiB, a);
  check(pool);
}

TEST_F(vmm_pool_pause, AListenerThatThrowsIsCountedAndThePoolGoesOn)
{
  auto pool = make();
  pool.add_map_listener([](vmm_mapping_event const&) { throw std::runtime_error{"listener"}; });
  void* p = pool.allocate(MiB, a);
  EXPECT_EQ(pool.stats().listener_failures, 1U);
  pool.deallocate(p, MiB, a);
  check(pool);
}

}  // namespace
}  // namespace gpumem::test
