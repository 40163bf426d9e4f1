// The invariant-check build (-DGPUMEM_CHECK_INVARIANTS=ON): after a slow path the library runs the
// resource's check_invariants(), and a broken invariant aborts with the invariant named. In every
// other build the check is not run at all.
#include <gpumem/detail/invariant_checks.hpp>
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/thread_cache_resource_adaptor.hpp>

#include <gtest/gtest.h>

#include <cstdint>

namespace gpumem::detail {
namespace {

TEST(InvariantChecks, RunOnlyInTheCheckBuild)
{
  int runs = 0;
  check_after_slow_path("grow", [&] { ++runs; });
  EXPECT_EQ(runs, invariant_check_build ? 1 : 0);
}

TEST(InvariantChecksDeathTest, ABrokenInvariantAbortsNamingIt)
{
  if (!invariant_check_build) { GTEST_SKIP() << "configure with -DGPUMEM_CHECK_INVARIANTS=ON"; }
  EXPECT_DEATH(check_after_slow_path(
                   "grow", [] { throw logic_error{"pool: invariant broken: free bytes 1 != 2"}; }),
               "invariant broken after grow: .*pool: invariant broken: free bytes 1 != 2");
}

std::uint64_t checks() noexcept
{
  return invariant_checks_run.load();
}

// The pool checks its invariants after its slow path (the first allocation grows it), not on a
// hit; so does the per-thread cache (after a miss and a trim, not after a hit).
TEST(InvariantChecks, ResourcesCheckAfterTheirSlowPathsOnly)
{
  if (!invariant_check_build) { GTEST_SKIP() << "configure with -DGPUMEM_CHECK_INVARIANTS=ON"; }
  host_runtime rt{{.capacity_bytes = std::size_t{64} << 20, .backed = false}};
  mr::cuda_memory_resource cuda{rt};
  mr::pool_memory_resource<mr::cuda_memory_resource> pool{&cuda, 0, std::nullopt, rt};
  auto const start = checks();
  void* a          = pool.allocate(4096);  // grows: the slow path
  EXPECT_EQ(checks(), start + 1);
  pool.deallocate(a, 4096);
  void* b = pool.allocate(4096);  // the same stream's free block: a hit
  EXPECT_EQ(checks(), start + 1);
  pool.deallocate(b, 4096);

  mr::thread_cache_resource_adaptor<mr::pool_memory_resource<mr::cuda_memory_resource>> cache{
      &pool};
  auto const before_cache = checks();
  void* c                 = cache.allocate(4096);  // a miss: the cache's slow path
  EXPECT_GT(checks(), before_cache);
  cache.deallocate(c, 4096);  // kept in the calling thread's cache
  auto const cached = checks();
  void* d           = cache.allocate(4096);  // a hit: no check
  EXPECT_EQ(checks(), cached);
  cache.deallocate(d, 4096);
  cache.trim();
  EXPECT_GT(checks(), cached);
}

TEST(InvariantChecks, OutsideTheCheckBuildNothingIsCounted)
{
  if (invariant_check_build) { GTEST_SKIP() << "the check build counts its checks"; }
  host_runtime rt{{.capacity_bytes = std::size_t{64} << 20, .backed = false}};
  mr::cuda_memory_resource cuda{rt};
  mr::pool_memory_resource<mr::cuda_memory_resource> pool{&cuda, 0, std::nullopt, rt};
  pool.deallocate(pool.allocate(4096), 4096);
  EXPECT_EQ(checks(), 0U);
}

}  // namespace
}  // namespace gpumem::detail
