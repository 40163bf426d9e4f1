// The driver calls of vmm_pool_memory_resource's growth: how a growth cuts new memory into handles,
// and the bundled training traces (tools/gpumem/traces) replayed twice on one pool over the
// simulated device: the cold (first) pass takes its memory in few handles, the warm (second) pass
// finds the layout the cold pass left and makes no driver call, and the footprint stays lean.
#include "suballocator_test_helpers.hpp"

#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>
#include <gpumem/replay/replay.hpp>
#include <gpumem/runtime/metered_runtime.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <ostream>
#include <string>
#include <unistd.h>
#include <utility>

#ifndef GPUMEM_TEST_TRACE_DIR
#error "GPUMEM_TEST_TRACE_DIR names the bundled traces' folder (tests/CMakeLists.txt)"
#endif
#ifndef GPUMEM_TEST_RECORDED_DIR
#error "GPUMEM_TEST_RECORDED_DIR names the recorded traces' folder (tests/CMakeLists.txt)"
#endif

namespace gpumem::test {
namespace {

// The ends of a growth's new memory are handles of handle_bytes (a small block beside a large one
// pins one of them); between them, twice that: half the creates, maps and access grants there.
TEST(vmm_pool_growth, ALargeGrowthHasHandlesOfTwiceHandleBytesBetweenItsEnds)
{
  detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = 1024 * MiB}};
  mr::vmm_pool_memory_resource pool{{.reserve_bytes = 2048 * MiB}, rt};  // handles of 16 MiB
  void* p = pool.allocate(160 * MiB);                                    // 16 + 3 x 32 + 3 x 16 MiB
  EXPECT_EQ(rt.calls().vmm_create, 7U);
  EXPECT_EQ(rt.calls().vmm_map, 7U);
  EXPECT_EQ(pool.stats().handles, 7U);
  EXPECT_EQ(pool.stats().held_bytes, 160 * MiB);
  void* q = pool.allocate(40 * MiB);  // 16 + 16 + 8 MiB: no middle
  EXPECT_EQ(rt.calls().vmm_create, 10U);
  pool.deallocate(q, 40 * MiB);
  pool.deallocate(p, 160 * MiB);
  pool.check_invariants();
  rt.check_invariants();
}

TEST(vmm_pool_growth, OneHandlePerGrowthStaysOne)
{
  detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = 1024 * MiB}};
  mr::vmm_pool_memory_resource pool{{.reserve_bytes = 2048 * MiB, .handle_bytes = 0}, rt};
  void* p = pool.allocate(500 * MiB);
  EXPECT_EQ(rt.calls().vmm_create, 1U);
  pool.deallocate(p, 500 * MiB);
  pool.check_invariants();
}

// A limit too large to round up to granules is no limit (it used to wrap around to one granule).
TEST(vmm_pool_growth, TheLargestHandleLimitIsNoLimit)
{
  for (auto const limit : {SIZE_MAX, SIZE_MAX - MiB, std::size_t{1} << 63}) {
    detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = 1024 * MiB}};
    mr::vmm_pool_memory_resource pool{{.reserve_bytes = 2048 * MiB, .handle_bytes = limit}, rt};
    void* p = pool.allocate(500 * MiB);
    EXPECT_EQ(rt.calls().vmm_create, 1U) << "limit " << limit;
    pool.deallocate(p, 500 * MiB);
    pool.check_invariants();
  }
}

struct trace_case {
  char const* name;
  double max_held_over_live;       // the cold pass's, with this tree's growth (design.md)
  std::uint64_t max_cold_handles;  // handles the cold pass creates
};
void PrintTo(trace_case const& c, std::ostream* os)
{
  *os << c.name;
}

struct vmm_pool_trace : ::testing::TestWithParam<trace_case> {
  detail::host_runtime rt{detail::host_runtime_options{
      .capacity_bytes = std::size_t{80} << 30, .backed = false, .auto_complete = true}};
  trace::metered_runtime meter{rt};
};

std::string describe(trace::driver_call_counts const& c)
{
  std::string out;
  for (std::size_t k = 0; k < trace::driver_call_kinds; ++k) {
    if (c.of[k].calls == 0) { continue; }
    out += std::string{trace::to_string(static_cast<trace::driver_call>(k))} + " " +
           std::to_string(c.of[k].calls) + "; ";
  }
  return out;
}

TEST_P(vmm_pool_trace, AWarmPassMakesNoDriverCallAndTheColdPassFewHandles)
{
  auto const profile =
      trace::profile_trace(std::string{GPUMEM_TEST_TRACE_DIR} + "/" + GetParam().name + ".csv");
  mr::vmm_pool_memory_resource pool{{}, meter};
  meter.count_driver_calls(true);
  auto const cold       = trace::replay(profile, pool, "vmm_pool", nullptr, meter);
  auto const cold_calls = meter.driver_calls();
  auto const warm       = trace::replay(profile, pool, "vmm_pool", nullptr, meter);
  auto const warm_calls = meter.driver_calls() - cold_calls;
  ASSERT_FALSE(cold.failure.has_value());
  ASSERT_FALSE(warm.failure.has_value());
  EXPECT_GT(cold_calls[trace::driver_call::create].calls, 0U);
  EXPECT_LE(cold_calls[trace::driver_call::create].calls, GetParam().max_cold_handles)
      << describe(cold_calls);
  EXPECT_EQ(warm_calls.total_calls(), 0U) << describe(warm_calls);
  EXPECT_LE(cold.footprint_ratio(profile), GetParam().max_held_over_live);
  EXPECT_EQ(warm.peak_held_bytes, cold.peak_held_bytes);
  pool.check_invariants();
}

INSTANTIATE_TEST_SUITE_P(traces, vmm_pool_trace,
                         ::testing::Values(trace_case{"gpt2_train", 1.0080, 560},
                                           trace_case{"resnet50_train", 1.0055, 520}),
                         [](auto const& info) { return std::string{info.param.name}; });

/// A recorded trace (bench/traces/<name>.csv.gz) unpacked into a temporary file with gzip, which
/// is removed with this object; path() is empty when gzip failed.
class unpacked_trace {
 public:
  explicit unpacked_trace(std::string const& name)
      : path_{(std::filesystem::temp_directory_path() /
               (name + "." + std::to_string(::getpid()) + ".csv"))
                  .string()}
  {
    auto const command = "gzip -dc '" + std::string{GPUMEM_TEST_RECORDED_DIR} + "/" + name +
                         ".csv.gz' > '" + path_ + "'";
    if (std::system(command.c_str()) != 0) { path_.clear(); }
  }
  unpacked_trace(unpacked_trace const&)            = delete;
  unpacked_trace& operator=(unpacked_trace const&) = delete;
  ~unpacked_trace()
  {
    if (!path_.empty()) { std::filesystem::remove(path_); }
  }
  [[nodiscard]] std::string const& path() const noexcept { return path_; }

 private:
  std::string path_;
};

/// Replays a recorded trace on simulated streams (trace stream 0: the default stream, each other
/// one a stream of its own) over one pool, pass after pass.
struct multistream_replay {
  detail::host_runtime rt{detail::host_runtime_options{
      .capacity_bytes = std::size_t{80} << 30, .backed = false, .auto_complete = true}};
  trace::metered_runtime meter{rt};
  std::map<std::uint64_t, cudaStream_t> streams;
  trace::replay_options options;
  trace::trace_profile profile;

  explicit multistream_replay(std::string const& path) : profile{trace::profile_trace(path)}
  {
    options.stream_of = [this](std::uint64_t id) -> cudaStream_t {
      if (id == 0) { return nullptr; }
      auto [it, fresh] = streams.try_emplace(id, nullptr);
      if (fresh) { it->second = rt.create_stream(); }
      return it->second;
    };
    meter.count_driver_calls(true);
  }
  /// One pass over `pool`, with the driver calls it made.
  std::pair<trace::replay_result, trace::driver_call_counts> pass(mr::device_memory_resource& pool)
  {
    auto const before = meter.driver_calls();
    auto result       = trace::replay(profile, pool, "vmm_pool", nullptr, meter, options);
    return {std::move(result), meter.driver_calls() - before};
  }
};

// A training loop on one host thread with three streams: the compute stream, a side stream that
// prepares batches and a third for a weight average. The compute stream takes the idle list first
// (its blocks fill the holes between live ones); the side streams take their own lists first, so
// each batch reuses the last one's block. With the idle list first for every stream, the batches
// took the holes and the compute stream's blocks went elsewhere: 1.052x the live bytes at the peak
// and 298 unmaps in the cold pass, against 1.026x and 131.
TEST(vmm_pool_recorded, ASideStreamTakesItsOwnListFirstAndTheFirstStreamFreesToTheIdleList)
{
  unpacked_trace const trace{"train_multistream"};
  if (trace.path().empty()) { GTEST_SKIP() << "gzip could not unpack the recorded trace"; }
  multistream_replay replay{trace.path()};
  ASSERT_EQ(replay.profile.streams.size(), 3U);
  mr::vmm_pool_memory_resource pool{{}, replay.meter};
  auto const [cold, calls] = replay.pass(pool);
  ASSERT_FALSE(cold.failure.has_value());
  EXPECT_LE(cold.footprint_ratio(replay.profile), 1.03);
  EXPECT_LE(calls[trace::driver_call::create].calls, 372U) << describe(calls);
  EXPECT_LE(calls[trace::driver_call::unmap].calls, 200U) << describe(calls);
  // A second pass over the same pool finds the first one's layout: the first stream's frees join
  // the idle list at once (with them in its own list until a growth: 316 maps, 7 creates).
  auto const [warm, warm_calls] = replay.pass(pool);
  ASSERT_FALSE(warm.failure.has_value());
  EXPECT_EQ(warm_calls[trace::driver_call::create].calls, 0U) << describe(warm_calls);
  EXPECT_LE(warm_calls[trace::driver_call::map].calls, 150U) << describe(warm_calls);
  pool.check_invariants();
}

// The same trace, passes 2 to 4: the side streams' frees are handed over to the idle list at the
// compute stream's next allocation (an event per stream), so all free memory coalesces there and
// each step finds the layout of the last one of its shape: no warm pass grows, moves a handle or
// synchronizes the device. With the side streams' frees left in their lists until a reclaim, the
// warm passes made 116, 249 and 251 unmaps and 26, 39 and 29 device synchronizations, and held
// 1.026x, then 1.037x the live bytes.
TEST(vmm_pool_recorded, TheWarmPassesOfAThreeStreamTraceMoveNoHandleAndNeverSynchronize)
{
  unpacked_trace const trace{"train_multistream"};
  if (trace.path().empty()) { GTEST_SKIP() << "gzip could not unpack the recorded trace"; }
  multistream_replay replay{trace.path()};
  ASSERT_EQ(replay.profile.streams.size(), 3U);
  mr::vmm_pool_memory_resource pool{{}, replay.meter};
  auto const [cold, cold_calls] = replay.pass(pool);
  ASSERT_FALSE(cold.failure.has_value());
  EXPECT_LE(cold.footprint_ratio(replay.profile), 1.02);
  EXPECT_LE(cold_calls[trace::driver_call::unmap].calls, 20U) << describe(cold_calls);
  EXPECT_LE(cold_calls[trace::driver_call::device_synchronize].calls, 40U) << describe(cold_calls);
  for (int warm = 2; warm <= 4; ++warm) {
    auto const [result, calls] = replay.pass(pool);
    ASSERT_FALSE(result.failure.has_value());
    SCOPED_TRACE("pass " + std::to_string(warm) + ": " + describe(calls));
    EXPECT_EQ(calls[trace::driver_call::create].calls, 0U);
    EXPECT_EQ(calls[trace::driver_call::map].calls, 0U);
    EXPECT_EQ(calls[trace::driver_call::unmap].calls, 0U);
    EXPECT_EQ(calls[trace::driver_call::device_synchronize].calls, 0U);
    EXPECT_EQ(calls[trace::driver_call::event_synchronize].calls, 0U);
    EXPECT_EQ(calls[trace::driver_call::stream_synchronize].calls, 0U);
    // The handovers and the side streams' waits for the compute stream (180 and 180).
    EXPECT_LE(calls[trace::driver_call::event_record].calls, 250U);
    EXPECT_LE(calls[trace::driver_call::stream_wait].calls, 250U);
    EXPECT_EQ(result.peak_held_bytes, cold.peak_held_bytes);
  }
  pool.check_invariants();
}

}  // namespace
}  // namespace gpumem::test
