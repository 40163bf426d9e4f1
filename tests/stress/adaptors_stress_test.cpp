// Many threads through the adaptors that claim thread safety: counts stay exact, nothing races
// (run under TSan in CI), log lines never interleave.
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/aligned_resource_adaptor.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/limiting_resource_adaptor.hpp>
#include <gpumem/mr/logging_resource_adaptor.hpp>
#include <gpumem/mr/statistics_resource_adaptor.hpp>
#include <gpumem/mr/thread_safe_resource_adaptor.hpp>
#include <gpumem/mr/tracking_resource_adaptor.hpp>

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

constexpr int threads    = 6;
constexpr int iterations = 500;

/// Each thread allocates and frees random sizes, keeping up to 8 blocks live; also reads through
/// `observe` (getters racing with updates).
void hammer(mr::device_memory_resource& mr, std::function<void()> const& observe = {})
{
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<std::pair<void*, std::size_t>> mine;
      for (int i = 0; i < iterations; ++i) {
        std::size_t const n = 1 + rng() % 20000;
        mine.emplace_back(mr.allocate(n), n);
        if (mine.size() > 8) {
          auto const k = rng() % mine.size();
          mr.deallocate(mine[k].first, mine[k].second);
          mine.erase(mine.begin() + static_cast<long>(k));
        }
        if (observe && i % 16 == 0) { observe(); }
      }
      for (auto [p, n] : mine) { mr.deallocate(p, n); }
    });
  }
  for (auto& th : pool) { th.join(); }
}

TEST(adaptors_stress, StatisticsCountsStayExact)
{
  detail::host_runtime rt{};
  mr::cuda_memory_resource base{rt};
  mr::statistics_resource_adaptor<mr::cuda_memory_resource> stats{&base};
  hammer(stats, [&] {
    (void)stats.get_bytes_counter();
    stats.check_invariants();
  });
  EXPECT_EQ(stats.get_bytes_counter().value, 0);
  EXPECT_EQ(stats.get_allocations_counter().value, 0);
  EXPECT_EQ(stats.get_allocations_counter().total, threads * iterations);
  EXPECT_LE(stats.get_allocations_counter().peak, threads * 9);
}

TEST(adaptors_stress, TrackingMapStaysExact)
{
  detail::host_runtime rt{};
  mr::cuda_memory_resource base{rt};
  mr::tracking_resource_adaptor<mr::cuda_memory_resource> tracking{&base, true};
  hammer(tracking, [&] {
    (void)tracking.get_outstanding_allocations_str();
    tracking.check_invariants();
  });
  EXPECT_EQ(tracking.get_allocated_bytes(), 0u);
  EXPECT_TRUE(tracking.get_outstanding_allocations().empty());
  EXPECT_EQ(rt.live_allocations(), 0u);
}

TEST(adaptors_stress, LoggingLinesNeverInterleave)
{
  detail::host_runtime rt{};
  mr::cuda_memory_resource base{rt};
  std::ostringstream out;
  {
    mr::logging_resource_adaptor<mr::cuda_memory_resource> logging{&base, out};
    hammer(logging, [&] { logging.flush(); });
  }
  std::istringstream in{out.str()};
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "Thread,Time,Action,Pointer,Size,Stream");
  int allocs = 0, frees = 0;
  while (std::getline(in, line)) {
    ASSERT_EQ(std::count(line.begin(), line.end(), ','), 5) << line;
    allocs += line.find(",allocate,") != std::string::npos;
    frees += line.find(",free,") != std::string::npos;
  }
  EXPECT_EQ(allocs, threads * iterations);
  EXPECT_EQ(frees, threads * iterations);
}

TEST(adaptors_stress, DeepStackOverAThreadSafeAdaptor)
{
  detail::host_runtime rt{};
  mr::cuda_memory_resource base{rt};
  mr::thread_safe_resource_adaptor<mr::cuda_memory_resource> safe{&base};
  mr::aligned_resource_adaptor<mr::device_memory_resource> aligned{&safe, 4096, 8192};
  mr::limiting_resource_adaptor<mr::device_memory_resource> limiting{&aligned, 1 << 30};
  mr::statistics_resource_adaptor<mr::device_memory_resource> stats{&limiting};
  hammer(stats, [&] { limiting.check_invariants(); });
  EXPECT_EQ(limiting.get_allocated_bytes(), 0u);
  EXPECT_EQ(stats.get_bytes_counter().value, 0);
  EXPECT_EQ(rt.used_bytes(), 0u);
}

}  // namespace
}  // namespace gpumem::test
