// tracking_resource_adaptor: outstanding map, allocated bytes, stacks, the leak report.
#include "adaptor_test_support.hpp"

#include <gpumem/detail/format.hpp>
#include <gpumem/mr/tracking_resource_adaptor.hpp>
#include <gpumem/trace/trace_reader.hpp>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <sstream>
#include <string>

namespace gpumem::test {
namespace {

using tracking      = mr::tracking_resource_adaptor<mr::cuda_memory_resource>;
using tracking_test = host_upstream;

TEST_F(tracking_test, TracksOutstandingAllocationsAndBytes)
{
  tracking mr{&base};
  void* a = mr.allocate(1000);
  void* b = mr.allocate(3000);
  EXPECT_EQ(mr.get_allocated_bytes(), 4000u);
  auto const& live = mr.get_outstanding_allocations();
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live.at(a).allocation_size, 1000u);
  EXPECT_EQ(live.at(b).allocation_size, 3000u);
  EXPECT_EQ(live.at(a).strace, nullptr);  // stacks off by default
  mr.deallocate(a, 1000);
  EXPECT_EQ(mr.get_allocated_bytes(), 3000u);
  EXPECT_EQ(live.count(a), 0u);
  mr.deallocate(b, 3000);
  EXPECT_TRUE(live.empty());
  EXPECT_EQ(mr.get_allocated_bytes(), 0u);
  EXPECT_THROW((tracking{static_cast<mr::cuda_memory_resource*>(nullptr)}), gpumem::logic_error);
}

TEST_F(tracking_test, LeakReportNamesPointerAndSize)
{
  tracking mr{device_async_resource_ref{base}};
  std::ostringstream quiet;
  mr.log_outstanding_allocations(quiet);
  EXPECT_EQ(quiet.str(), "");  // nothing outstanding: nothing logged
  void* leak               = mr.allocate(1536);
  std::string const report = mr.get_outstanding_allocations_str();
  EXPECT_NE(report.find("Outstanding allocations: 1"), std::string::npos) << report;
  EXPECT_NE(report.find(detail::ptr_str(leak) + ": " + detail::bytes_str(1536)), std::string::npos)
      << report;
  EXPECT_EQ(report.find("#0"), std::string::npos) << "no stack was captured";
  std::ostringstream log;
  mr.log_outstanding_allocations(log);
  EXPECT_EQ(log.str(), report);
  mr.deallocate(leak, 1536);
}

TEST_F(tracking_test, CapturedStacksAppearInTheLeakReport)
{
  tracking mr{&base, true};
  void* leak       = mr.allocate(4096);
  auto const& info = mr.get_outstanding_allocations().at(leak);
  ASSERT_NE(info.strace, nullptr);
  EXPECT_GT(info.strace->frames().size(), 1u);
  std::string const report = mr.get_outstanding_allocations_str();
  EXPECT_NE(report.find(detail::ptr_str(leak)), std::string::npos) << report;
  EXPECT_NE(report.find("#0 "), std::string::npos) << report;
  EXPECT_NE(report.find("#1 "), std::string::npos) << report;
  mr.deallocate(leak, 4096);
  EXPECT_EQ(mr.get_outstanding_allocations_str().find("#0"), std::string::npos);
}

TEST_F(tracking_test, FailedAndUntrackedCallsLeaveTheMapExact)
{
  void* before = base.allocate(512);  // made before the adaptor: untracked
  tracking mr{&base};
  void* a = mr.allocate(256);
  rt.fail_next_allocations(1);
  EXPECT_THROW((void)mr.allocate(10000), gpumem::out_of_memory);
  EXPECT_EQ(mr.get_outstanding_allocations().size(), 1u);
  EXPECT_EQ(mr.get_allocated_bytes(), 256u);
  EXPECT_NO_THROW(mr.check_invariants());
  mr.deallocate(before, 512);  // forwarded upstream, tracking unchanged
  EXPECT_EQ(mr.get_allocated_bytes(), 256u);
  mr.deallocate(a, 256);
  EXPECT_EQ(rt.live_allocations(), 0u);
  tracking moved{std::move(mr)};
  EXPECT_EQ(moved.get_allocated_bytes(), 0u);
}

// The leak report as a trace: one allocate row per live allocation, its stack in Frames.
TEST_F(tracking_test, OutstandingAllocationsWriteATraceWithTheirStacks)
{
  auto const path =
      (std::filesystem::temp_directory_path() / ("leaks." + std::to_string(::getpid()) + ".csv"))
          .string();
  tracking with{&base, true};
  tracking without{&base};
  void* a = with.allocate(4096);
  void* b = without.allocate(512);
  for (auto* mr : {&with, &without}) {
    {
      std::ofstream out{path};
      mr->write_outstanding_trace(out);
    }
    auto const events = trace::read_all(path);
    ASSERT_EQ(events.size(), 1U);
    EXPECT_EQ(events[0].act, trace::action::allocate);
    if (mr == &with) {
      EXPECT_EQ(events[0].pointer, reinterpret_cast<std::uintptr_t>(a));
      EXPECT_EQ(events[0].size, 4096U);
      EXPECT_NE(events[0].frames.find('|'), std::string::npos) << events[0].frames;
    } else {
      EXPECT_EQ(events[0].pointer, reinterpret_cast<std::uintptr_t>(b));
      EXPECT_EQ(events[0].frames, "");  // no stacks captured
    }
  }
  std::remove(path.c_str());
  with.deallocate(a, 4096);
  without.deallocate(b, 512);
}

}  // namespace
}  // namespace gpumem::test
