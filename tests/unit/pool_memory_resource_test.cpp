// White-box tests of pool_memory_resource over the host stand-in: sizes, best fit, coalescing,
// growth, maximum size, out-of-memory diagnosis, bad input, and the stream-ordering rules.
#include "suballocator_test_helpers.hpp"

#include <gpumem/mr/fixed_size_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>

#include <future>
#include <thread>

namespace gpumem::test {
namespace {

using pool_mr = mr::pool_memory_resource<mr::cuda_memory_resource>;

struct pool_test : ::testing::Test {
  host_upstream up;
  cudaStream_t a = up.rt.create_stream();
  cudaStream_t b = up.rt.create_stream();
  pool_mr make(std::size_t initial, std::optional<std::size_t> max = std::nullopt)
  {
    return pool_mr{&up.cuda, initial, max, up.rt};
  }
};

TEST_F(pool_test, ConstructorChecksSizesAndUpstream)
{
  EXPECT_THROW(make(1000), gpumem::logic_error);
  EXPECT_THROW(make(MiB, MiB + 1), gpumem::logic_error);
  EXPECT_THROW(make(2 * MiB, MiB), gpumem::logic_error);
  EXPECT_THROW(pool_mr(static_cast<mr::cuda_memory_resource*>(nullptr), MiB), gpumem::logic_error);
  auto pool = make(MiB, 4 * MiB);
  EXPECT_EQ(pool.pool_size(), MiB);
  EXPECT_EQ(pool.maximum_pool_size(), 4 * MiB);
  EXPECT_TRUE(pool.get_upstream_resource() == device_async_resource_ref{up.cuda});
  pool_mr by_ref{up.cuda, 0, std::nullopt, up.rt};
  EXPECT_EQ(by_ref.pool_size(), 0U);
}

TEST_F(pool_test, BestFitPicksTheSmallestFreeBlockThatFits)
{
  auto pool                 = make(MiB);
  std::size_t const sizes[] = {KiB, 256, 4 * KiB, 256, 2 * KiB, 256};
  void* p[6];
  for (int i = 0; i < 6; ++i) { p[i] = pool.allocate(sizes[i], a); }
  for (int i : {0, 2, 4}) { pool.deallocate(p[i], sizes[i], a); }
  EXPECT_EQ(pool.allocate(2 * KiB, a), p[4]);  // 2 KiB hole, not the 4 KiB one
  EXPECT_EQ(pool.allocate(KiB, a), p[0]);
  pool.check_invariants();
  pool.deallocate(p[4], 2 * KiB, a);
  pool.deallocate(p[0], KiB, a);
  for (int i : {1, 3, 5}) { pool.deallocate(p[i], sizes[i], a); }
  pool.check_invariants();
}

TEST_F(pool_test, FreedNeighboursCoalesceBackIntoOneBlock)
{
  auto pool = make(MiB);
  std::vector<void*> ptrs;
  for (int i = 0; i < 8; ++i) { ptrs.push_back(pool.allocate(1000 * (i + 1), a)); }
  for (int i : {1, 3, 5, 7, 0, 2, 6, 4}) { pool.deallocate(ptrs[i], 1000 * (i + 1), a); }
  pool.check_invariants();
  auto const stats = pool.get_free_stats();
  // The stream's list holds the coalesced run; the rest of the chunk is free of any stream.
  EXPECT_EQ(stats.free_bytes, MiB);
  EXPECT_LE(stats.blocks, 2U);
  EXPECT_EQ(pool.allocate(MiB, b) != nullptr, true);  // reclaim merges both into one
  EXPECT_EQ(pool.pool_size(), MiB);
}

TEST_F(pool_test, SizesRoundUpTo256AndPointersAreAligned)
{
  auto pool = make(MiB);
  void* p   = pool.allocate(1, a);
  void* q   = pool.allocate(257, a);
  EXPECT_TRUE(is_pointer_aligned(p, 256));
  EXPECT_TRUE(is_pointer_aligned(q, 256));
  EXPECT_EQ(pool.get_free_stats().free_bytes, MiB - 256 - 512);
  EXPECT_THROW((void)pool.allocate(100, std::size_t{384}), gpumem::logic_error);
  pool.deallocate(p, 1, a);
  pool.deallocate(q, 257, a);
  pool.check_invariants();
}

TEST_F(pool_test, GrowsGeometricallyFromEmpty)
{
  auto pool = make(0);
  void* p   = pool.allocate(256, a);
  EXPECT_EQ(pool.pool_size(), MiB);  // at least 1 MiB per growth step
  void* q = pool.allocate(MiB, a);
  EXPECT_EQ(pool.pool_size(), 2 * MiB);  // max(request, pool size)
  void* r = pool.allocate(3 * MiB, a);
  EXPECT_EQ(pool.pool_size(), 5 * MiB);
  pool.check_invariants();
  for (auto [ptr, n] : {std::pair{p, 256UL}, {q, MiB}, {r, 3 * MiB}}) {
    pool.deallocate(ptr, n, a);
  }
  pool.check_invariants();
}

TEST_F(pool_test, NeverGrowsBeyondTheMaximum)
{
  auto pool = make(MiB, 2 * MiB);
  void* p   = pool.allocate(MiB, a);
  void* q   = pool.allocate(MiB, a);
  EXPECT_EQ(pool.pool_size(), 2 * MiB);
  auto const msg = message_of<out_of_memory>([&] { (void)pool.allocate(256, a); });
  EXPECT_NE(msg.find("maximum pool size 2.00 MiB"), std::string::npos) << msg;
  EXPECT_THROW((void)pool.allocate(3 * MiB, a), out_of_memory);  // beyond the maximum at once
  EXPECT_EQ(pool.pool_size(), 2 * MiB);
  pool.deallocate(p, MiB, a);
  pool.deallocate(q, MiB, a);
  pool.check_invariants();
}

TEST_F(pool_test, OutOfMemoryNamesRequestPoolFreeAndLargestBlock)
{
  auto pool = make(MiB, MiB);
  void* p   = pool.allocate(256 * KiB, a);
  void* q   = pool.allocate(256 * KiB, a);
  pool.deallocate(p, 256 * KiB, a);
  auto const msg = message_of<out_of_memory>([&] { (void)pool.allocate(800 * KiB, a); });
  for (char const* part : {"cannot allocate 800.00 KiB", "pool size 1.00 MiB", "free 768.00 KiB",
                           "largest free block 512.00 KiB", "fragmentation"}) {
    EXPECT_NE(msg.find(part), std::string::npos) << part << " missing from: " << msg;
  }
  pool.deallocate(q, 256 * KiB, a);
  pool.check_invariants();
}

TEST_F(pool_test, FailedUpstreamLeavesThePoolUsable)
{
  auto pool = make(MiB);
  void* p   = pool.allocate(MiB, a);
  up.rt.fail_next_allocations(64);
  EXPECT_THROW((void)pool.allocate(MiB, a), out_of_memory);
  pool.check_invariants();
  up.rt.fail_next_allocations(0);
  void* q = pool.allocate(MiB, a);
  EXPECT_EQ(pool.pool_size(), 2 * MiB);
  pool.deallocate(p, MiB, a);
  pool.deallocate(q, MiB, a);
  pool.check_invariants();
}

TEST_F(pool_test, DoubleForeignAndWrongSizeFreesAreReportedNotCorrupting)
{
  auto pool = make(MiB);
  void* p   = pool.allocate(1000, a);
  pool.deallocate(p, 1000, a);
  pool.deallocate(p, 1000, a);  // double free
  EXPECT_EQ(pool.bad_deallocations(), 1U);
  int local{};
  pool.deallocate(&local, 4, a);  // foreign pointer
  EXPECT_EQ(pool.bad_deallocations(), 2U);
  void* q = pool.allocate(1000, a);
  pool.deallocate(q, 5000, a);  // wrong size: reported, the true block is freed
  EXPECT_EQ(pool.bad_deallocations(), 3U);
  pool.check_invariants();
  EXPECT_EQ(pool.get_free_stats().free_bytes, MiB);
}

TEST_F(pool_test, ReleasesEverythingUpstreamOnDestruction)
{
  {
    auto pool = make(MiB);
    (void)pool.allocate(3 * MiB, a);  // leaked by the user: still returned
    EXPECT_GT(up.rt.live_allocations(), 1U);
  }
  EXPECT_EQ(up.rt.live_allocations(), 0U);
  EXPECT_EQ(up.rt.used_bytes(), 0U);
}

TEST_F(pool_test, HitPathMakesNoRuntimeCall)
{
  auto pool = make(MiB);
  pool.deallocate(pool.allocate(4 * KiB, a), 4 * KiB, a);  // warm: the stream's list has a block
  auto const before = up.rt.calls();
  for (int i = 0; i < 1000; ++i) { pool.deallocate(pool.allocate(4 * KiB, a), 4 * KiB, a); }
  auto const after = up.rt.calls();
  EXPECT_EQ(after.allocate, before.allocate);
  EXPECT_EQ(after.event_create, before.event_create);
  EXPECT_EQ(after.event_record, before.event_record);
  EXPECT_EQ(after.stream_wait_event, before.stream_wait_event);
  EXPECT_EQ(after.synchronize, before.synchronize);
}

}  // namespace
}  // namespace gpumem::test

// Properties of the upstream are forwarded (as RMM's forward_property does): a pool of managed
// memory is host-accessible too; one of device memory is not.
#include <gpumem/mr/managed_memory_resource.hpp>
static_assert(gpumem::detail::async_resource_with<
              gpumem::mr::pool_memory_resource<gpumem::mr::managed_memory_resource>,
              cuda::mr::device_accessible, cuda::mr::host_accessible>);
static_assert(gpumem::detail::async_resource_with<
              gpumem::mr::fixed_size_memory_resource<gpumem::mr::managed_memory_resource>,
              cuda::mr::device_accessible, cuda::mr::host_accessible>);
static_assert(
    !cuda::has_property<gpumem::mr::pool_memory_resource<gpumem::mr::cuda_memory_resource>,
                        cuda::mr::host_accessible>);
