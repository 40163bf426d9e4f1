// vmm_pool_memory_resource's spare handles over the host stand-in: what a trim unmaps is kept (up
// to spare_bytes) and mapped again by the next growth without a create; spares are held memory
// (stats, the metered footprint); pause, out of memory, release_spares() and the destructor release
// them; listeners heard the unmap; invariants hold over a random walk.
#include "suballocator_test_helpers.hpp"

#include <gpumem/mr/vmm_pool_memory_resource.hpp>
#include <gpumem/spec/resource_factory.hpp>
#include <gpumem/runtime/metered_runtime.hpp>

#include <random>
#include <utility>
#include <vector>

namespace gpumem::test {
namespace {

using vmm_pool = mr::vmm_pool_memory_resource;

struct vmm_pool_spares : ::testing::Test {
  detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = 64 * MiB}};
  cudaStream_t a = rt.create_stream();

  vmm_pool make(mr::vmm_pool_options o = {})
  {
    if (o.reserve_bytes == 0) { o.reserve_bytes = 256 * MiB; }
    return vmm_pool{o, rt};
  }
  /// The pool's and the runtime's invariants, and the device's physical memory is what the pool
  /// says it holds.
  void check(vmm_pool const& pool)
  {
    pool.check_invariants();
    rt.check_invariants();
    auto const s = pool.stats();
    EXPECT_EQ(s.held_bytes, s.mapped_bytes + s.spare_bytes);
    EXPECT_EQ(rt.vmm_state().physical_bytes, s.held_bytes);
    EXPECT_EQ(rt.vmm_state().mapped_bytes, s.mapped_bytes);
  }
  /// Allocates and frees `bytes` (one growth on an empty pool).
  void grow_and_free(vmm_pool& pool, std::size_t bytes)
  {
    pool.deallocate(pool.allocate(bytes, a), bytes, a);
  }
};

TEST_F(vmm_pool_spares, AWarmRegrowthAfterATrimCreatesNothing)
{
  auto pool = make();  // default: 64 MiB of spares, 16 MiB handles
  grow_and_free(pool, 40 * MiB);
  EXPECT_EQ(pool.trim_to(0), 40 * MiB);
  auto s = pool.stats();
  EXPECT_EQ(s.mapped_bytes, 0U);
  EXPECT_EQ(s.spare_bytes, 40 * MiB);
  EXPECT_EQ(s.spare_handles, 3U);  // 16 + 16 + 8 MiB
  check(pool);
  auto const before = rt.calls();
  void* p           = pool.allocate(40 * MiB, a);
  EXPECT_EQ(rt.calls().vmm_create, before.vmm_create) << "the spares were mapped again";
  EXPECT_EQ(rt.calls().vmm_map, before.vmm_map + 3);
  EXPECT_EQ(rt.calls().vmm_release, before.vmm_release);
  EXPECT_EQ(pool.stats().spare_bytes, 0U);
  rt.vmm_check_mapped(p, 40 * MiB);
  check(pool);
  pool.deallocate(p, 40 * MiB, a);
}

TEST_F(vmm_pool_spares, AStepSmallerThanASpareMapsTheSpareWhole)
{
  auto pool = make();
  grow_and_free(pool, 16 * MiB);
  (void)pool.trim_to(0);
  auto const creates = rt.calls().vmm_create;
  void* p            = pool.allocate(2 * MiB, a);  // the 16 MiB spare, not a new 2 MiB handle
  EXPECT_EQ(rt.calls().vmm_create, creates);
  EXPECT_EQ(pool.stats().mapped_bytes, 16 * MiB);
  void* q = pool.allocate(14 * MiB, a);  // the rest of it: no growth
  EXPECT_EQ(rt.calls().vmm_create, creates);
  check(pool);
  pool.deallocate(p, 2 * MiB, a);
  pool.deallocate(q, 14 * MiB, a);
}

TEST_F(vmm_pool_spares, SparesAreBoundedByTheOption)
{
  auto pool = make({.spare_bytes = 20 * MiB});
  grow_and_free(pool, 48 * MiB);  // three handles of 16 MiB
  auto const released = rt.calls().vmm_release;
  EXPECT_EQ(pool.trim_to(0), 48 * MiB);
  EXPECT_EQ(pool.stats().spare_bytes, 16 * MiB);  // one fits in 20 MiB, two do not
  EXPECT_EQ(rt.calls().vmm_release, released + 2);
  check(pool);

  auto none = make({.spare_bytes = 0});  // none kept: a trim gives everything back
  grow_and_free(none, 16 * MiB);
  (void)none.trim_to(0);
  EXPECT_EQ(none.stats().held_bytes, 0U);
  EXPECT_EQ(rt.vmm_state().physical_bytes, 16 * MiB);  // the first pool's spare
  none.check_invariants();
}

TEST_F(vmm_pool_spares, TheSpecSetsTheBound)
{
  auto stack = spec::build("vmm_pool:reserve=256MiB,spares=8MiB", rt, true);
  auto& pool = dynamic_cast<vmm_pool&>(stack.top());
  EXPECT_EQ(pool.options().spare_bytes, 8 * MiB);
  auto none  = spec::build("vmm_pool:reserve=256MiB,spares=0", rt, true);
  auto& zero = dynamic_cast<vmm_pool&>(none.top());
  grow_and_free(zero, 8 * MiB);
  none.trim();  // what an empty_cache does
  EXPECT_EQ(zero.stats().held_bytes, 0U);
  EXPECT_THROW((void)spec::build("vmm_pool:spares=lots", rt, true), spec::spec_error);
}

TEST_F(vmm_pool_spares, TheReleaseThresholdKeepsSparesToo)
{
  auto pool = make({.release_threshold_bytes = 0});
  void* p   = pool.allocate(16 * MiB, a);
  void* q   = pool.allocate(16 * MiB, a);
  pool.deallocate(p, 16 * MiB, a);       // a free handle below q
  void* r = pool.allocate(20 * MiB, a);  // moves p's handle up, creates 4 MiB: threshold 0
  pool.deallocate(r, 20 * MiB, a);
  pool.deallocate(q, 16 * MiB, a);
  auto const creates = rt.calls().vmm_create;
  (void)pool.trim_to(0);
  EXPECT_GT(pool.stats().spare_bytes, 0U);
  void* again = pool.allocate(32 * MiB, a);
  EXPECT_EQ(rt.calls().vmm_create, creates);
  check(pool);
  pool.deallocate(again, 32 * MiB, a);
}

TEST_F(vmm_pool_spares, SparesAreInTheMeteredFootprint)
{
  trace::metered_runtime meter{rt};
  mr::vmm_pool_options o{.reserve_bytes = 256 * MiB};
  vmm_pool pool{o, meter};
  grow_and_free(pool, 32 * MiB);
  (void)pool.trim_to(0);
  EXPECT_EQ(pool.stats().mapped_bytes, 0U);
  EXPECT_EQ(meter.held_bytes(), 32 * MiB) << "spares are device memory the pool holds";
  EXPECT_EQ(pool.stats().held_bytes, 32 * MiB);
  EXPECT_EQ(pool.release_spares(), 32 * MiB);
  EXPECT_EQ(meter.held_bytes(), 0U);
  EXPECT_EQ(rt.vmm_state().physical_bytes, 0U);
  pool.check_invariants();
}

TEST_F(vmm_pool_spares, PauseReleasesTheSpares)
{
  auto pool  = make();
  void* live = pool.allocate(4 * MiB, a);
  grow_and_free(pool, 32 * MiB);
  (void)pool.trim_to(0);
  ASSERT_GT(pool.stats().spare_bytes, 0U);
  ASSERT_TRUE(pool.pause(pause_mode::discard));
  EXPECT_EQ(pool.stats().spare_bytes, 0U);
  EXPECT_EQ(rt.vmm_state().physical_bytes, 0U) << "a pause gives back everything";
  pool.check_invariants();
  ASSERT_TRUE(pool.resume());
  check(pool);
  pool.deallocate(live, 4 * MiB, a);
}

TEST_F(vmm_pool_spares, OutOfMemoryReleasesSparesThatCannotServe)
{
  // 10 MiB of address space: a 4 MiB spare on each side of a live 2 MiB block. No 6 MiB range
  // exists, so the request fails, and the spares are released first.
  auto pool   = make({.reserve_bytes = 10 * MiB, .handle_bytes = 4 * MiB});
  void* left  = pool.allocate(4 * MiB, a);
  void* mid   = pool.allocate(2 * MiB, a);
  void* right = pool.allocate(4 * MiB, a);
  pool.deallocate(left, 4 * MiB, a);
  pool.deallocate(right, 4 * MiB, a);
  (void)pool.trim_to(0);
  ASSERT_EQ(pool.stats().spare_bytes, 8 * MiB);
  EXPECT_THROW((void)pool.allocate(6 * MiB, a), out_of_memory);
  EXPECT_EQ(pool.stats().spare_bytes, 0U);
  check(pool);
  pool.deallocate(mid, 2 * MiB, a);
}

TEST_F(vmm_pool_spares, ASingleHandleAllocationMayTakeTheSparesMemory)
{
  auto pool = make();
  grow_and_free(pool, 64 * MiB);  // the whole device
  (void)pool.trim_to(0);
  ASSERT_EQ(pool.stats().spare_bytes, 64 * MiB);
  void* p = pool.allocate_single_handle(16 * MiB);  // out of memory until the spares go
  EXPECT_EQ(pool.stats().spare_bytes, 0U);
  pool.deallocate(p, 16 * MiB, a);
  pool.check_invariants();
}

TEST_F(vmm_pool_spares, TheDestructorReleasesTheSpares)
{
  {
    auto pool = make();
    grow_and_free(pool, 32 * MiB);
    (void)pool.trim_to(0);
    ASSERT_GT(rt.vmm_state().physical_bytes, 0U);
  }
  EXPECT_EQ(rt.vmm_state().physical_bytes, 0U);
  EXPECT_EQ(rt.vmm_state().handles, 0U);
  rt.check_invariants();
}

TEST_F(vmm_pool_spares, ListenersHearTheUnmapAndTheMapAgain)
{
  auto pool = make();
  std::size_t mapped{};
  std::size_t unmapped{};
  pool.add_map_listener([&](vmm_mapping_event const& e) { mapped += e.bytes; });
  pool.add_unmap_listener([&](vmm_mapping_event const& e) { unmapped += e.bytes; });
  grow_and_free(pool, 32 * MiB);
  (void)pool.trim_to(0);
  EXPECT_EQ(mapped, 32 * MiB);
  EXPECT_EQ(unmapped, 32 * MiB) << "a spare is unmapped memory";
  grow_and_free(pool, 32 * MiB);
  EXPECT_EQ(mapped, 64 * MiB);
  EXPECT_EQ(mapped - unmapped, pool.stats().mapped_bytes);
}

// A random walk of allocations, frees and trims: after every step the invariants hold, the device
// holds what the pool says, and a growth that created new memory kept no spare (they never add to
// a peak).
TEST_F(vmm_pool_spares, RandomWalkKeepsTheInvariants)
{
  auto pool = make({.reserve_bytes = 96 * MiB, .handle_bytes = 8 * MiB, .spare_bytes = 24 * MiB});
  std::mt19937 rng{33};
  std::vector<std::pair<void*, std::size_t>> live;
  std::size_t creating_growths{};
  for (int step = 0; step < 600; ++step) {
    auto const op = rng() % 10;
    if (op < 5) {
      auto const bytes   = (1 + rng() % 12) * MiB + 256 * (rng() % 4);
      auto const creates = rt.calls().vmm_create;
      void* p{};
      try {
        p = pool.allocate(bytes, a);
      } catch (out_of_memory const&) {
        EXPECT_EQ(pool.stats().spare_bytes, 0U) << "step " << step;
      }
      if (p != nullptr) {
        live.emplace_back(p, bytes);
        if (rt.calls().vmm_create != creates) {
          ++creating_growths;
          EXPECT_EQ(pool.stats().spare_bytes, 0U) << "step " << step;
        }
      }
    } else if (op < 9 && !live.empty()) {
      auto const i = rng() % live.size();
      pool.deallocate(live[i].first, live[i].second, a);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      (void)pool.trim_to((rng() % 3) * 8 * MiB);
      EXPECT_LE(pool.stats().spare_bytes, 24 * MiB);
    }
    check(pool);
    if (HasFailure()) { FAIL() << "step " << step; }
  }
  EXPECT_GT(creating_growths, 0U);
  for (auto const& [p, n] : live) { pool.deallocate(p, n, a); }
}

}  // namespace
}  // namespace gpumem::test
