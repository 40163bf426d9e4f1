// The invariant-check build (-DGPUMEM_CHECK_INVARIANTS=ON): after a slow path the library runs the
// resource's check_invariants(), and a broken invariant aborts with the invariant named. In every
// other build the check is not run at all.
#include <gpumem/detail/invariant_checks.hpp>
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>

#include <gtest/gtest.h>

#include <vector>

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

// A pool that grows and reclaims many times over passes its checks (in the check build each
// growth runs the pool's check_invariants()), and calls of one thread may re-enter the gate.
TEST(InvariantChecks, APoolThatGrowsPassesItsChecks)
{
  host_runtime rt{{.capacity_bytes = std::size_t{64} << 20, .backed = false}};
  mr::cuda_memory_resource cuda{rt};
  mr::pool_memory_resource<mr::cuda_memory_resource> pool{&cuda, 0, std::nullopt, rt};
  std::vector<void*> live;
  for (std::size_t i = 1; i <= 64; ++i) { live.push_back(pool.allocate(i * 4096)); }
  for (std::size_t i = 0; i < live.size(); i += 2) { pool.deallocate(live[i], (i + 1) * 4096); }
  for (std::size_t i = 1; i < live.size(); i += 2) { pool.deallocate(live[i], (i + 1) * 4096); }
  pool.check_invariants();
  EXPECT_GT(pool.pool_size(), 0U);
}

}  // namespace
}  // namespace gpumem::detail
