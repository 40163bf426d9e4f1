// vmm_pool_memory_resource replaying the bundled training traces (tools/gpumem/traces) twice on
// one pool over the simulated device: the warm (second) pass finds the layout the cold pass left
// and makes no driver call, and the footprint stays as lean as it was.
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>
#include <gpumem/replay/replay.hpp>
#include <gpumem/runtime/metered_runtime.hpp>

#include <gtest/gtest.h>

#include <ostream>
#include <string>

#ifndef GPUMEM_TEST_TRACE_DIR
#error "GPUMEM_TEST_TRACE_DIR names the bundled traces' folder (tests/CMakeLists.txt)"
#endif

namespace gpumem::test {
namespace {

struct trace_case {
  char const* name;
  double max_held_over_live;  // the cold pass's, with this tree's placement (see design.md)
};
void PrintTo(trace_case const& c, std::ostream* os)
{
  *os << c.name;
}

struct vmm_pool_warm_pass : ::testing::TestWithParam<trace_case> {
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

TEST_P(vmm_pool_warm_pass, MakesNoDriverCallAndKeepsTheFootprint)
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
  EXPECT_EQ(warm_calls.total_calls(), 0U) << describe(warm_calls);
  EXPECT_LE(cold.footprint_ratio(profile), GetParam().max_held_over_live);
  EXPECT_EQ(warm.peak_held_bytes, cold.peak_held_bytes);
  pool.check_invariants();
}

INSTANTIATE_TEST_SUITE_P(traces, vmm_pool_warm_pass,
                         ::testing::Values(trace_case{"gpt2_train", 1.0095},
                                           trace_case{"resnet50_train", 1.0075}),
                         [](auto const& info) { return std::string{info.param.name}; });

}  // namespace
}  // namespace gpumem::test
