// vmm_pool's home layout over the host stand-in: when a free leaves the whole pool free again, the
// next allocation moves the handles that growths moved since back where they were the last time
// (detail/vmm_home_layout.hpp). A job run again and again then starts every run from the same
// layout: the same addresses and the same peak each run, where without it the layout drifts and
// the peak creeps up. Nothing moves while the stream still works or is being captured (the next
// such moment tries again); listeners hear the moves (cause home); a failed map leaves the pool
// consistent and usable; the option and the spec key turn it off.
#include "suballocator_test_helpers.hpp"

#include <support/repeated_job.hpp>

#include <gpumem/detail/vmm_home_layout.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>
#include <gpumem/spec/resource_factory.hpp>

#include <algorithm>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

using vmm_pool = mr::vmm_pool_memory_resource;
using detail::vmm_home_layout;

// -- the plan -------------------------------------------------------------------------------------

char* at(std::size_t mib)
{
  return reinterpret_cast<char*>((std::size_t{1} << 40) + mib * MiB);
}

TEST(vmm_home_layout, EverythingAtHomeNeedsNoMove)
{
  vmm_home_layout home;
  home.remember({{at(0), 4 * MiB}, {at(4), 8 * MiB}, {at(20), 4 * MiB}});
  auto const moves = home.plan({{at(0), 4 * MiB}, {at(4), 8 * MiB}, {at(20), 4 * MiB}});
  ASSERT_TRUE(moves.has_value());
  EXPECT_TRUE(moves->empty());
}

TEST(vmm_home_layout, MovedHandlesGoBackToEmptySlotsOfTheirSize)
{
  vmm_home_layout home;
  home.remember({{at(0), 4 * MiB}, {at(4), 8 * MiB}, {at(12), 4 * MiB}, {at(40), 2 * MiB}});
  // The 8 MiB handle moved to 100, one 4 MiB handle to 60, the 2 MiB one stayed.
  auto const moves =
      home.plan({{at(0), 4 * MiB}, {at(40), 2 * MiB}, {at(60), 4 * MiB}, {at(100), 8 * MiB}});
  ASSERT_TRUE(moves.has_value());
  ASSERT_EQ(moves->size(), 2U);
  EXPECT_EQ((*moves)[0].from, at(60));
  EXPECT_EQ((*moves)[0].to, at(12));
  EXPECT_EQ((*moves)[0].bytes, 4 * MiB);
  EXPECT_EQ((*moves)[1].from, at(100));
  EXPECT_EQ((*moves)[1].to, at(4));
  EXPECT_EQ((*moves)[1].bytes, 8 * MiB);
}

TEST(vmm_home_layout, AHandleOfAnotherSizeAtASlotMovesToo)
{
  vmm_home_layout home;
  home.remember({{at(0), 8 * MiB}, {at(16), 4 * MiB}});
  auto const moves = home.plan({{at(0), 4 * MiB}, {at(16), 8 * MiB}});  // swapped sizes
  ASSERT_TRUE(moves.has_value());
  ASSERT_EQ(moves->size(), 2U);
  EXPECT_EQ((*moves)[0].from, at(0));
  EXPECT_EQ((*moves)[0].to, at(16));
  EXPECT_EQ((*moves)[1].from, at(16));
  EXPECT_EQ((*moves)[1].to, at(0));
}

TEST(vmm_home_layout, OtherHandlesThanHomesMeanNoPlan)
{
  vmm_home_layout home;
  home.remember({{at(0), 4 * MiB}, {at(4), 4 * MiB}});
  EXPECT_FALSE(home.plan({{at(0), 4 * MiB}}).has_value()) << "one released";
  EXPECT_FALSE(home.plan({{at(0), 4 * MiB}, {at(4), 4 * MiB}, {at(8), 2 * MiB}}).has_value())
      << "one created";
  EXPECT_FALSE(home.plan({{at(0), 4 * MiB}, {at(30), 8 * MiB}}).has_value()) << "another size";
}

TEST(vmm_home_layout, TheCheckNamesOverlappingSlots)
{
  vmm_home_layout home;
  home.remember({{at(0), 4 * MiB}, {at(2), 4 * MiB}});
  EXPECT_THROW(home.check("test"), logic_error);
  home.remember({{at(0), 4 * MiB}, {at(4), 4 * MiB}});
  EXPECT_NO_THROW(home.check("test"));
}

// -- the pool -------------------------------------------------------------------------------------

// Seed 19: a job whose growths move handles in every run after the first (found by trying seeds:
// in 12 of the first 29 the last of eight runs peaked higher without the home layout, in none
// lower).
constexpr unsigned drifting_job = 19;
constexpr int runs              = 8;

struct vmm_pool_home : ::testing::Test {
  detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = 1024 * MiB}};
  cudaStream_t a            = rt.create_stream();
  std::vector<job_step> job = make_repeated_job(drifting_job, 300);

  static mr::vmm_pool_options options(bool home = true)
  {
    return {.reserve_bytes = 4096 * MiB, .handle_bytes = 4 * MiB, .return_home = home};
  }
  /// One run with the stream idle (every allocation's work done), and its peak held bytes.
  std::vector<void*> run(vmm_pool& pool, std::size_t& peak)
  {
    peak = 0;
    return run_job(job, pool, a, [&](void*, std::size_t) {
      rt.complete_all();
      peak = std::max(peak, pool.stats().held_bytes);
    });
  }
  /// Two runs, the second moving handles in its growths: the pool ends wholly free, away from
  /// home, and its next allocation is watched.
  void leave_home(vmm_pool& pool)
  {
    std::size_t peak{};
    (void)run(pool, peak);
    (void)run(pool, peak);
  }
  /// One block allocated and freed (the pool wholly free again after it); the returns so far.
  std::uint64_t one_block(vmm_pool& pool)
  {
    void* p = pool.allocate(MiB, a);
    pool.deallocate(p, MiB, a);
    return pool.stats().home_returns;
  }
  void check(vmm_pool const& pool)
  {
    pool.check_invariants();
    rt.check_invariants();
    EXPECT_EQ(rt.vmm_state().misuse_count, 0U);
    auto const s = pool.stats();
    EXPECT_EQ(rt.vmm_state().physical_bytes, s.held_bytes);
    EXPECT_EQ(rt.vmm_state().mapped_bytes, s.mapped_bytes);
  }
};

TEST_F(vmm_pool_home, ARepeatedJobStartsEveryRunFromTheSameLayout)
{
  vmm_pool pool{options(), rt};
  std::size_t first_peak{};
  auto const first = run(pool, first_peak);
  std::size_t second_peak{};
  auto const second = run(pool, second_peak);
  for (int r = 2; r < runs; ++r) {
    std::size_t peak{};
    EXPECT_EQ(run(pool, peak), second) << "run " << r << " placed blocks elsewhere";
    EXPECT_EQ(peak, first_peak) << "run " << r;
    check(pool);
  }
  EXPECT_EQ(second_peak, first_peak);
  auto const s = pool.stats();
  EXPECT_EQ(s.home_returns, static_cast<std::uint64_t>(runs - 2)) << "once before each later run";
  EXPECT_GT(s.home_moved_handles, s.home_returns - 1);
  (void)first;
}

TEST_F(vmm_pool_home, WithoutItTheSameJobDriftsAndItsPeakCreeps)
{
  vmm_pool pool{options(false), rt};
  std::size_t first_peak{};
  (void)run(pool, first_peak);
  std::size_t last_peak{};
  std::vector<void*> last;
  std::vector<void*> before;
  for (int r = 1; r < runs; ++r) {
    before = std::move(last);
    last   = run(pool, last_peak);
  }
  EXPECT_NE(last, before) << "the layout still drifts after seven runs";
  EXPECT_GT(last_peak, first_peak) << "the drift costs memory";
  EXPECT_EQ(pool.stats().home_returns, 0U);
  check(pool);
}

// After a job, a loop of one large allocation and its free (nothing else live): its growth moves
// free handles to make room, and every free leaves the pool wholly free. Going home each time
// would move the same handles there and back on every iteration (about 28 maps each for seed 5
// before the pool weighed the run); a run of one free is not worth it, its layout becomes home, and
// the loop maps what it would without the home layout.
TEST_F(vmm_pool_home, AShortRunIsNotWorthTheMovesAndKeepsItsLayout)
{
  auto const maps_of_loop = [&](bool home) {
    vmm_pool pool{options(home), rt};
    (void)run_job(make_repeated_job(5, 300), pool, a,
                  [&](void*, std::size_t) { rt.complete_all(); });
    auto const before = rt.calls().vmm_map;
    for (int i = 0; i < 50; ++i) {
      void* p = pool.allocate(100 * MiB, a);
      rt.complete_all();
      pool.deallocate(p, 100 * MiB, a);
    }
    check(pool);
    return rt.calls().vmm_map - before;
  };
  auto const with_home    = maps_of_loop(true);
  auto const without_home = maps_of_loop(false);
  EXPECT_EQ(with_home, without_home);
  EXPECT_LT(with_home, 50U) << "not a move there and back per iteration";
}

TEST_F(vmm_pool_home, ListenersHearTheMovesAsHomeEventsUnmapsFirst)
{
  vmm_pool pool{options(), rt};
  leave_home(pool);  // moves handles; ends wholly free
  std::vector<vmm_mapping_event> heard;
  auto const listen = [&](vmm_mapping_event const& e) { heard.push_back(e); };
  (void)pool.add_map_listener(listen);
  (void)pool.add_unmap_listener(listen);
  void* p = pool.allocate(MiB, a);  // the first allocation of the next run takes the layout home
  ASSERT_EQ(pool.stats().home_returns, 1U);
  ASSERT_FALSE(heard.empty());
  std::size_t unmapped{};
  std::size_t mapped{};
  bool mapping_started = false;
  for (auto const& e : heard) {
    EXPECT_EQ(e.cause, vmm_mapping_cause::home);
    EXPECT_EQ(e.handles.size(), 1U);
    if (e.mapped) {
      mapped += e.bytes;
      mapping_started = true;
    } else {
      EXPECT_FALSE(mapping_started) << "every unmap comes before the maps";
      unmapped += e.bytes;
    }
  }
  EXPECT_EQ(mapped, unmapped) << "moves only: nothing created or released";
  EXPECT_EQ(pool.stats().home_moved_handles, heard.size() / 2);
  pool.deallocate(p, MiB, a);
  check(pool);
}

TEST_F(vmm_pool_home, NothingMovesWhileTheStreamWorksAndTheNextEmptyMomentTriesAgain)
{
  vmm_pool pool{options(), rt};
  leave_home(pool);
  rt.enqueue(a);  // the stream still works when the next run begins
  auto const unmaps = rt.calls().vmm_unmap;
  EXPECT_EQ(one_block(pool), 0U);
  EXPECT_EQ(rt.calls().vmm_unmap, unmaps) << "the device was not waited for, nothing moved";
  EXPECT_LT(rt.completed(a), rt.enqueued(a));
  rt.complete_all();
  EXPECT_EQ(one_block(pool), 1U) << "the next such moment, with the stream idle";
  check(pool);
}

TEST_F(vmm_pool_home, DuringACaptureNothingMovesAndTheCaptureStaysValid)
{
  vmm_pool pool{options(), rt};
  leave_home(pool);
  rt.begin_global_capture(a);
  EXPECT_EQ(one_block(pool), 0U);
  EXPECT_TRUE(rt.end_capture(a)) << "no call the capture forbids";
  EXPECT_EQ(one_block(pool), 1U) << "after the capture";
  check(pool);
}

TEST_F(vmm_pool_home, AFailedMapLeavesThePoolConsistentAndTheAllocationServed)
{
  vmm_pool pool{options(), rt};
  leave_home(pool);
  auto const unmaps = rt.calls().vmm_unmap;
  rt.fail_next_maps(1);
  void* p = nullptr;
  ASSERT_NO_THROW(p = pool.allocate(MiB, a)) << "the allocation does not fail for it";
  EXPECT_GT(rt.calls().vmm_unmap, unmaps) << "the moves had begun";
  EXPECT_EQ(pool.stats().home_returns, 0U);
  check(pool);
  rt.vmm_check_mapped(p, MiB);
  pool.deallocate(p, MiB, a);
  leave_home(pool);  // usable; the layout of the next empty moment becomes home
  check(pool);
}

TEST_F(vmm_pool_home, APauseKeepsTheLayoutAndNothingMovesWhilePaused)
{
  vmm_pool pool{options(), rt};
  leave_home(pool);
  ASSERT_TRUE(pool.pause(pause_mode::discard));
  EXPECT_THROW((void)pool.allocate(MiB, a), paused_error);
  ASSERT_TRUE(pool.resume());
  void* p = pool.allocate(MiB, a);
  pool.deallocate(p, MiB, a);
  check(pool);
  std::size_t peak{};
  (void)run(pool, peak);
  check(pool);
}

// The first allocations after a wholly free moment come from several threads at once: the one that
// sees the moment asks to take the layout home while the others allocate (and end the one-thread
// mode; usually one of them has taken memory first, and nothing moves); the pool stays consistent
// and every block usable (run under TSan in CI).
TEST_F(vmm_pool_home, ThreadsAllocatingAtTheEmptyMomentKeepThePoolConsistent)
{
  detail::host_runtime threaded{
      detail::host_runtime_options{.capacity_bytes = 1024 * MiB, .auto_complete = true}};
  cudaStream_t const s0 = threaded.create_stream();
  vmm_pool pool{options(), threaded};
  (void)run_job(job, pool, s0);
  (void)run_job(job, pool, s0);  // moved handles; wholly free, the next allocation is watched
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        std::size_t const n          = (1 + (t * 7 + i) % 12) * MiB;
        void* p                      = pool.allocate(n, cudaStreamPerThread);
        static_cast<char*>(p)[0]     = 1;
        static_cast<char*>(p)[n - 1] = 1;
        pool.deallocate(p, n, cudaStreamPerThread);
      }
    });
  }
  for (auto& th : threads) { th.join(); }
  threaded.complete_all();
  pool.check_invariants();
  threaded.check_invariants();
  EXPECT_EQ(threaded.vmm_state().misuse_count, 0U);
}

TEST_F(vmm_pool_home, TheOptionAndTheSpecKeyTurnItOff)
{
  EXPECT_TRUE(mr::vmm_pool_options{}.return_home) << "on by default";
  auto off = spec::build("vmm_pool:reserve=256MiB,home=false", rt, true);
  EXPECT_FALSE(dynamic_cast<vmm_pool const&>(off.top()).options().return_home);
  auto on = spec::build("vmm_pool:reserve=256MiB", rt, true);
  EXPECT_TRUE(dynamic_cast<vmm_pool const&>(on.top()).options().return_home);
  EXPECT_THROW((void)spec::build("vmm_pool:home=maybe", rt, true), spec::spec_error);
}

}  // namespace
}  // namespace gpumem::test
