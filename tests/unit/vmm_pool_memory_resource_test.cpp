// White-box tests of vmm_pool_memory_resource over the host stand-in's virtual-memory model:
// backing on demand, free granules moved out of holes instead of new physical memory, the release
// threshold, trim, out of memory, failed driver calls unwound, the stream rule for unmapping.
#include "suballocator_test_helpers.hpp"

#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <cstring>
#include <random>
#include <utility>
#include <vector>

namespace gpumem::test {
namespace {

using vmm_pool = mr::vmm_pool_memory_resource;

struct vmm_pool_test : ::testing::Test {
  detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = 64 * MiB}};
  cudaStream_t a = rt.create_stream();
  cudaStream_t b = rt.create_stream();

  vmm_pool make(mr::vmm_pool_options o = {})
  {
    if (o.reserve_bytes == 0) { o.reserve_bytes = 256 * MiB; }
    return vmm_pool{o, rt};
  }
  /// Checks the pool's and the runtime's invariants and that every given block is mapped.
  void check(vmm_pool const& pool, std::vector<std::pair<void*, std::size_t>> const& live = {})
  {
    pool.check_invariants();
    rt.check_invariants();
    for (auto const& [p, n] : live) { rt.vmm_check_mapped(p, n); }
    EXPECT_EQ(rt.vmm_state().mapped_bytes, pool.pool_size());
  }
};

TEST_F(vmm_pool_test, ReservesOnceAndMapsOnlyWhatIsAskedFor)
{
  auto pool = make();
  EXPECT_EQ(rt.vmm_state().reservations, 1U);
  EXPECT_EQ(rt.vmm_state().physical_bytes, 0U);
  void* p = pool.allocate(3 * MiB, a);
  EXPECT_EQ(rt.vmm_state().physical_bytes, 4 * MiB);  // two 2 MiB granules
  std::memset(p, 0xab, 3 * MiB);                      // backed: mapped memory is real
  check(pool, {{p, 3 * MiB}});
  void* q = pool.allocate(MiB, a);  // the rest of the second granule: no growth
  EXPECT_EQ(rt.vmm_state().physical_bytes, 4 * MiB);
  pool.deallocate(p, 3 * MiB, a);
  pool.deallocate(q, MiB, a);
  check(pool);
}

TEST_F(vmm_pool_test, HitPathMakesNoRuntimeCall)
{
  auto pool = make();
  pool.deallocate(pool.allocate(5 * MiB, a), 5 * MiB, a);
  auto const before = rt.calls();
  for (int i = 0; i < 100; ++i) {
    pool.deallocate(pool.allocate(MiB + 256 * i, a), MiB + 256 * i, a);
  }
  auto const after = rt.calls();
  EXPECT_EQ(after.vmm_map, before.vmm_map);
  EXPECT_EQ(after.synchronize, before.synchronize);
  EXPECT_EQ(after.event_record, before.event_record);
}

TEST_F(vmm_pool_test, GrowthJoinsTheFreeMemoryNextToTheMappedEnd)
{
  auto pool = make();
  pool.deallocate(pool.allocate(MiB, a), MiB, a);  // 2 MiB mapped and free
  void* q = pool.allocate(3 * MiB, a);             // 2 MiB free + 2 MiB more, contiguous
  EXPECT_EQ(rt.vmm_state().physical_bytes, 4 * MiB);
  EXPECT_EQ(rt.calls().vmm_unmap, 0U);
  check(pool, {{q, 3 * MiB}});
  pool.deallocate(q, 3 * MiB, a);
}

TEST_F(vmm_pool_test, FreeGranulesMoveOutOfHolesInsteadOfNewMemory)
{
  auto pool = make();
  void* x[3];
  for (auto& p : x) { p = pool.allocate(8 * MiB, a); }  // three handles of 8 MiB
  pool.deallocate(x[0], 8 * MiB, a);
  pool.deallocate(x[2], 8 * MiB, a);  // two 8 MiB holes, x[1] between them
  auto const created = rt.calls().vmm_create;
  void* big          = pool.allocate(16 * MiB, a);  // no 16 MiB of contiguous free memory
  EXPECT_EQ(rt.calls().vmm_create, created) << "a free handle was moved, none created";
  EXPECT_EQ(rt.vmm_state().physical_bytes, 24 * MiB);
  EXPECT_EQ(pool.stats().handles, 3U);
  check(pool, {{x[1], 8 * MiB}, {big, 16 * MiB}});
  pool.deallocate(big, 16 * MiB, a);
  pool.deallocate(x[1], 8 * MiB, a);
  check(pool);
}

TEST_F(vmm_pool_test, IdleHolesAreFilledBeforeTheStreamsOwnFreeBlocks)
{
  auto pool = make();
  void* a1  = pool.allocate(MiB, a);
  void* a2  = pool.allocate(MiB, a);  // one 2 MiB granule, both halves live
  pool.deallocate(a1, MiB, a);
  void* big = pool.allocate(4 * MiB, a);  // a growth: a1's hole moves to the idle list
  void* c   = pool.allocate(3 * MiB, a);  // no 3 MiB free anywhere: another growth
  pool.deallocate(c, 3 * MiB, a);         // c's block is in stream a's own list
  auto const mapped = pool.pool_size();
  ASSERT_EQ(pool.get_free_stats().free_bytes, mapped - MiB - 4 * MiB);
  // The idle list's 1 MiB hole serves it; c's block (a best fit in a's own list) stays whole.
  auto* p  = static_cast<char*>(pool.allocate(MiB, a));
  auto* cc = static_cast<char*>(c);
  EXPECT_TRUE(p + MiB <= cc || p >= cc + 3 * MiB) << "served from the stream's latest free";
  EXPECT_EQ(pool.pool_size(), mapped);
  check(pool, {{a2, MiB}, {big, 4 * MiB}, {p, MiB}});
  for (auto [q, n] : {std::pair{a2, MiB}, {big, 4 * MiB}, {static_cast<void*>(p), MiB}}) {
    pool.deallocate(q, n, a);
  }
  check(pool);
}

// A training loop allocates the same sequence every step: weights that stay, per layer a
// workspace and an activation on the way forward, one large block at the peak (more than any free
// block: a growth), gradients on the way back. Once a step has run, the pool must not keep taking
// physical memory. It did, every step, when the stream's own free list was searched first (284 MiB
// mapped after 12 steps, 226 after the second here): the idle list's holes stayed empty and the
// stream's latest frees were split instead, so each step laid its blocks out differently.
TEST(vmm_pool_repeated, ARepeatedWorkloadStopsGrowing)
{
  detail::host_runtime rt{
      detail::host_runtime_options{.capacity_bytes = std::size_t{8} << 30, .backed = false}};
  auto const s = rt.create_stream();
  vmm_pool pool{mr::vmm_pool_options{.reserve_bytes = std::size_t{64} << 30}, rt};
  using block = std::pair<void*, std::size_t>;
  std::mt19937 rng{1};  // mt19937's sequence is fixed by the standard
  auto pick = [&]() -> std::size_t {
    auto const r = rng();
    return r % 3 == 0 ? (1 + r % 12) * MiB : (1 + r % 4096) * 256;
  };
  int const layers = 24;
  std::vector<std::size_t> act, work, grad;
  for (int i = 0; i < layers; ++i) {
    act.push_back(pick());
    work.push_back(pick());
    grad.push_back(pick());
  }
  std::vector<block> weights;
  for (int i = 0; i < layers; ++i) {
    auto const n = pick();
    weights.emplace_back(pool.allocate(n, s), n);
  }
  auto free = [&](block const& b) { pool.deallocate(b.first, b.second, s); };
  std::vector<std::size_t> mapped;
  for (int step = 0; step < 12; ++step) {
    std::vector<block> acts, grads;
    for (int i = 0; i < layers; ++i) {
      block const w{pool.allocate(work[i], s), work[i]};
      acts.emplace_back(pool.allocate(act[i], s), act[i]);
      free(w);
    }
    free({pool.allocate(64 * MiB, s), 64 * MiB});
    for (int i = layers - 1; i >= 0; --i) {
      grads.emplace_back(pool.allocate(grad[i], s), grad[i]);
      free(acts[static_cast<std::size_t>(i)]);
      if (grads.size() > 3) {
        free(grads.front());
        grads.erase(grads.begin());
      }
    }
    for (auto const& g : grads) { free(g); }
    pool.check_invariants();
    mapped.push_back(pool.pool_size());
  }
  for (std::size_t step = 2; step < mapped.size(); ++step) {
    EXPECT_EQ(mapped[step], mapped[1]) << "step " << step + 1 << " mapped more than step 2";
  }
  for (auto const& w : weights) { free(w); }
  pool.check_invariants();
}

TEST_F(vmm_pool_test, OutOfMemoryOnlyWhenThePhysicalMemoryIsGone)
{
  auto pool = make();
  std::vector<void*> p;
  for (int i = 0; i < 8; ++i) { p.push_back(pool.allocate(8 * MiB, a)); }  // all 64 MiB
  for (int i = 0; i < 8; i += 2) { pool.deallocate(p[i], 8 * MiB, a); }    // 4 holes of 8 MiB
  void* big = pool.allocate(32 * MiB, a);  // fragmented address space, enough physical memory
  check(pool, {{big, 32 * MiB}});
  auto const msg = message_of<out_of_memory>([&] { (void)pool.allocate(8 * MiB, a); });
  EXPECT_NE(msg.find("cannot allocate 8.00 MiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("physical memory mapped"), std::string::npos) << msg;
  EXPECT_NE(msg.find("address space left"), std::string::npos) << msg;
  check(pool);
  pool.deallocate(big, 32 * MiB, a);  // still usable
  void* again = pool.allocate(8 * MiB, a);
  check(pool, {{again, 8 * MiB}});
  pool.deallocate(again, 8 * MiB, a);
  for (int i = 1; i < 8; i += 2) { pool.deallocate(p[i], 8 * MiB, a); }
  check(pool);
}

TEST_F(vmm_pool_test, BeforeFailingItReleasesEveryFreeGranule)
{
  auto pool = make();
  void* p   = pool.allocate(48 * MiB, a);
  pool.deallocate(p, 48 * MiB, a);
  void* small = pool.allocate(MiB, a);  // 47 MiB free, mapped
  // 64 MiB needs 16 MiB of new memory beyond what is mapped, and the device has exactly that only
  // once the free granules go back: none can, they are one handle with `small` in it. Fails:
  EXPECT_THROW((void)pool.allocate(64 * MiB, a), out_of_memory);
  pool.deallocate(small, MiB, a);
  void* all = pool.allocate(64 * MiB, a);  // the free handle is released, then 64 MiB fits
  check(pool, {{all, 64 * MiB}});
  pool.deallocate(all, 64 * MiB, a);
}

TEST_F(vmm_pool_test, ReleaseThresholdGivesFreeGranulesBackAtAGrowth)
{
  auto pool = make({.release_threshold_bytes = 0, .spare_bytes = 0});  // released, not kept
  std::size_t const sizes[] = {8 * MiB, 2 * MiB, 8 * MiB, 2 * MiB, 4 * MiB};
  void* p[5];
  for (int i = 0; i < 5; ++i) { p[i] = pool.allocate(sizes[i], a); }
  for (int i : {0, 2, 4}) { pool.deallocate(p[i], sizes[i], a); }
  auto const released = rt.calls().vmm_release;
  // 12 MiB: the 4 MiB hole at the end plus 8 MiB of one moved hole; the other hole stays free and
  // above the threshold of 0: released.
  void* q = pool.allocate(12 * MiB, a);
  EXPECT_EQ(rt.calls().vmm_release, released + 1);
  EXPECT_EQ(rt.vmm_state().physical_bytes, 16 * MiB);
  check(pool, {{q, 12 * MiB}, {p[1], 2 * MiB}, {p[3], 2 * MiB}});
  for (int i : {1, 3}) { pool.deallocate(p[i], sizes[i], a); }
  pool.deallocate(q, 12 * MiB, a);
}

TEST_F(vmm_pool_test, TrimToReleasesFreeGranulesAfterTheStreamsPassedTheFrees)
{
  auto pool = make();
  void* p   = pool.allocate(8 * MiB, a);
  void* q   = pool.allocate(8 * MiB, b);
  rt.enqueue(a);  // work on a still uses p when it is freed
  pool.deallocate(p, 8 * MiB, a);
  pool.deallocate(q, 8 * MiB, b);
  EXPECT_EQ(pool.trim_to(0), 16 * MiB);
  EXPECT_EQ(rt.completed(a), rt.enqueued(a)) << "unmapped only behind a synchronization";
  EXPECT_EQ(rt.vmm_state().mapped_bytes, 0U);
  EXPECT_EQ(rt.vmm_state().physical_bytes, 16 * MiB) << "kept as spare handles";
  EXPECT_EQ(pool.release_spares(), 16 * MiB);
  EXPECT_EQ(rt.vmm_state().physical_bytes, 0U);
  EXPECT_EQ(pool.pool_size(), 0U);
  check(pool);
  void* r = pool.allocate(MiB, b);  // usable again
  check(pool, {{r, MiB}});
  pool.deallocate(r, MiB, b);
}

TEST_F(vmm_pool_test, AFailedMapIsUnwound)
{
  auto pool = make();
  void* p   = pool.allocate(8 * MiB, a);
  void* q   = pool.allocate(2 * MiB, a);
  pool.deallocate(p, 8 * MiB, a);  // a hole to move: the growth unmaps it, then maps fail
  rt.fail_next_maps(1);
  EXPECT_THROW((void)pool.allocate(12 * MiB, a), cuda_error);
  check(pool, {{q, 2 * MiB}});
  EXPECT_EQ(rt.vmm_state().misuse_count, 0U);
  void* r = pool.allocate(12 * MiB, a);  // usable
  check(pool, {{q, 2 * MiB}, {r, 12 * MiB}});
  pool.deallocate(q, 2 * MiB, a);
  pool.deallocate(r, 12 * MiB, a);
}

TEST_F(vmm_pool_test, AFailedCreateChangesNothing)
{
  auto pool = make();
  void* p   = pool.allocate(4 * MiB, a);
  rt.fail_next_allocations(2);  // the growth and its retry after releasing
  EXPECT_THROW((void)pool.allocate(8 * MiB, a), out_of_memory);
  check(pool, {{p, 4 * MiB}});
  void* q = pool.allocate(8 * MiB, a);
  check(pool, {{p, 4 * MiB}, {q, 8 * MiB}});
  pool.deallocate(p, 4 * MiB, a);
  pool.deallocate(q, 8 * MiB, a);
}

TEST_F(vmm_pool_test, GrowthPercentMapsAheadOfNeed)
{
  auto pool = make({.growth_percent = 50});
  void* p   = pool.allocate(16 * MiB, a);
  void* q   = pool.allocate(MiB, a);  // 16 MiB mapped: 8 MiB ahead
  EXPECT_EQ(rt.vmm_state().physical_bytes, 16 * MiB + 2 * MiB + 8 * MiB);
  void* r = pool.allocate(7 * MiB, a);  // served from what was mapped ahead
  EXPECT_EQ(rt.vmm_state().physical_bytes, 26 * MiB);
  check(pool, {{p, 16 * MiB}, {q, MiB}, {r, 7 * MiB}});
  for (auto [x, n] : {std::pair{p, 16 * MiB}, {q, MiB}, {r, 7 * MiB}}) { pool.deallocate(x, n, a); }
}

TEST_F(vmm_pool_test, BadConfigurationAndRequests)
{
  detail::host_runtime no_vmm{detail::host_runtime_options{.vmm_supported = false}};
  auto const msg = message_of<cuda_error>([&] { vmm_pool bad{{}, no_vmm}; });
  EXPECT_NE(msg.find("VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED"), std::string::npos) << msg;
  EXPECT_THROW(make({.granularity_bytes = 3 * MiB}), logic_error);
  // A device that does not exist is refused at construction (as CUDA refuses its granularity),
  // not at the first growth.
  for (int const device : {1, 7}) {
    auto const bad_device = message_of<cuda_error>([&] { (void)make({.device = device}); });
    EXPECT_NE(bad_device.find("invalid device " + std::to_string(device)), std::string::npos)
        << bad_device;
  }
  auto const negative = message_of<logic_error>([&] { (void)make({.device = -2}); });
  EXPECT_NE(negative.find("device -2 is not a device number"), std::string::npos) << negative;
  auto pool = make();
  EXPECT_EQ(pool.granularity(), 2 * MiB);
  EXPECT_THROW((void)pool.allocate(512 * MiB, a), out_of_memory);  // more than the reservation
  EXPECT_THROW((void)pool.allocate(128 * MiB, a), out_of_memory);  // more than the device
  check(pool);
  void* p = pool.allocate(MiB, a);
  pool.deallocate(p, MiB, a);
  pool.deallocate(p, MiB, a);  // double free: reported, ignored
  EXPECT_EQ(pool.bad_deallocations(), 1U);
  check(pool);
}

TEST_F(vmm_pool_test, DestructorGivesEverythingBack)
{
  {
    auto pool = make();
    (void)pool.allocate(5 * MiB, a);  // never freed
    (void)pool.allocate(20 * MiB, b);
  }
  auto const s = rt.vmm_state();
  EXPECT_EQ(s.physical_bytes, 0U);
  EXPECT_EQ(s.reservations, 0U);
  EXPECT_EQ(rt.used_bytes(), 0U);
  rt.check_invariants();
}

TEST_F(vmm_pool_test, StatsReportTheFootprint)
{
  auto pool = make();
  void* p   = pool.allocate(3 * MiB, a);
  auto s    = pool.stats();
  EXPECT_EQ(s.mapped_bytes, 4 * MiB);
  EXPECT_EQ(s.reserved_bytes, 256 * MiB);
  EXPECT_EQ(s.free_bytes, MiB);
  EXPECT_EQ(s.largest_free_bytes, MiB);
  EXPECT_EQ(s.handles, 1U);  // one growth, one handle
  pool.deallocate(p, 3 * MiB, a);
}

// Free memory in a handle that also holds an allocation is pinned (only a request that fits there
// can use it); a handle wholly inside free blocks, of any list, is movable (a growth maps it where
// it needs memory, a trim releases it).
TEST_F(vmm_pool_test, StatsTellPinnedFromMovableFreeMemory)
{
  auto pool = make();
  void* x   = pool.allocate(8 * MiB, a);
  void* y   = pool.allocate(8 * MiB, a);  // two growths, a handle of 8 MiB each
  ASSERT_EQ(pool.stats().handles, 2U);
  auto expect = [&](std::size_t movable, std::size_t pinned) {
    auto const s = pool.stats();
    EXPECT_EQ(s.movable_free_bytes, movable);
    EXPECT_EQ(s.pinned_free_bytes, pinned);
    EXPECT_EQ(s.movable_free_bytes + s.pinned_free_bytes, s.free_bytes);
  };
  expect(0, 0);
  pool.deallocate(x, 8 * MiB, a);
  expect(8 * MiB, 0);
  void* small = pool.allocate(MiB, a);  // cut from x's free handle
  expect(0, 7 * MiB);
  pool.deallocate(y, 8 * MiB, b);  // into stream b's own list
  expect(8 * MiB, 7 * MiB);
  pool.deallocate(small, MiB, a);
  expect(16 * MiB, 0);
  check(pool);
}

TEST(vmm_pool_peers, PeerDevicesGetAccessToEveryMapping)
{
  detail::host_runtime rt{
      detail::host_runtime_options{.capacity_bytes = 64 * MiB, .device_count = 3}};
  auto const s = rt.create_stream();
  vmm_pool one{{.reserve_bytes = 256 * MiB, .peer_devices = {1}}, rt};
  EXPECT_EQ(one.options().peer_devices, std::vector<int>{1});
  void* p = one.allocate(3 * MiB, s);
  void* q = one.allocate(20 * MiB, s);  // a later growth: new mappings get the peers too
  for (void* x : {p, q}) {
    EXPECT_TRUE(rt.vmm_accessible_by(x, 0)) << "the pool's own device";
    EXPECT_TRUE(rt.vmm_accessible_by(x, 1)) << "the peer";
    EXPECT_FALSE(rt.vmm_accessible_by(x, 2)) << "not asked for";
  }
  one.deallocate(q, 20 * MiB, s);
  one.deallocate(p, 3 * MiB, s);
  vmm_pool all{{.reserve_bytes = 256 * MiB, .all_peers = true}, rt};
  void* r = all.allocate(MiB, s);
  EXPECT_TRUE(rt.vmm_accessible_by(r, 1) && rt.vmm_accessible_by(r, 2));
  all.deallocate(r, MiB, s);
}

TEST(vmm_pool_peers, ImpossiblePeersAreRefusedAtConstruction)
{
  detail::host_runtime rt{detail::host_runtime_options{
      .capacity_bytes = 64 * MiB, .device_count = 2, .peer_access = false}};
  auto message = [&](mr::vmm_pool_options o) {
    o.reserve_bytes = 256 * MiB;
    return message_of<gpumem::logic_error>([&] { vmm_pool{o, rt}; });
  };
  EXPECT_NE(message({.peer_devices = {0}}).find("peer device 0 is not another device"),
            std::string::npos);
  EXPECT_NE(message({.peer_devices = {5}}).find("peer device 5 is not another device"),
            std::string::npos);
  EXPECT_NE(message({.peer_devices = {1}}).find("device 1 has no peer capability with device 0"),
            std::string::npos);
  vmm_pool none{{.reserve_bytes = 256 * MiB, .all_peers = true}, rt};  // none capable: fine
  EXPECT_EQ(rt.vmm_state().reservations, 1U);
}

}  // namespace
}  // namespace gpumem::test
