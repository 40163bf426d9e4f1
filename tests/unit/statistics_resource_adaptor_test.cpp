// statistics_resource_adaptor: counters, the nested-scope peak rule (a sub-block's peak counts
// on top of the value its scope began at), exact failure paths.
#include "adaptor_test_support.hpp"

#include <gpumem/mr/statistics_resource_adaptor.hpp>

#include <stdexcept>

namespace gpumem::test {
namespace {

using stats      = mr::statistics_resource_adaptor<mr::cuda_memory_resource>;
using counter    = stats::counter;
using stats_test = host_upstream;

void expect_counter(counter const& c, std::int64_t value, std::int64_t peak, std::int64_t total)
{
  EXPECT_EQ(c.value, value);
  EXPECT_EQ(c.peak, peak);
  EXPECT_EQ(c.total, total);
}

TEST(counter_test, AddSubtractAndSubBlockPeakRule)
{
  counter c;
  c += 10;
  c += 5;
  c -= 12;
  expect_counter(c, 3, 15, 15);
  counter inner;  // a block that began while c.value was 3
  inner += 20;
  inner -= 20;
  inner += 4;
  expect_counter(inner, 4, 20, 24);
  c.add_counters_from_tracked_sub_block(inner);
  expect_counter(c, 7, 23, 39);  // peak = max(15, 3 + 20)
  counter small;
  small += 1;
  c.add_counters_from_tracked_sub_block(small);
  expect_counter(c, 8, 23, 40);  // 7 + 1 < 23: peak kept
}

TEST_F(stats_test, CountsBytesAndAllocations)
{
  stats mr{&base};
  void* a = mr.allocate(100);
  void* b = mr.allocate(200);
  expect_counter(mr.get_bytes_counter(), 300, 300, 300);
  expect_counter(mr.get_allocations_counter(), 2, 2, 2);
  mr.deallocate(a, 100);
  void* c = mr.allocate(50);
  expect_counter(mr.get_bytes_counter(), 250, 300, 350);
  expect_counter(mr.get_allocations_counter(), 2, 2, 3);
  mr.deallocate(b, 200);
  mr.deallocate(c, 50);
  expect_counter(mr.get_bytes_counter(), 0, 300, 350);
  expect_counter(mr.get_allocations_counter(), 0, 2, 3);
}

TEST_F(stats_test, NestedScopesCascadeWithShiftedPeaks)
{
  stats mr{device_async_resource_ref{base}};
  void* a           = mr.allocate(100);
  auto const before = mr.push_counters();  // returns the outer pair
  expect_counter(before.first, 100, 100, 100);
  expect_counter(mr.get_bytes_counter(), 0, 0, 0);  // the scope starts at zero
  void* b = mr.allocate(50);
  void* c = mr.allocate(30);
  mr.deallocate(c, 30);
  mr.push_counters();  // a scope inside the scope
  void* d = mr.allocate(500);
  mr.deallocate(d, 500);
  auto const innermost = mr.pop_counters();
  expect_counter(innermost.first, 0, 500, 500);
  expect_counter(mr.get_bytes_counter(), 50, 550, 580);  // peak = max(80, 50 + 500)
  auto const inner = mr.pop_counters();
  expect_counter(inner.first, 50, 550, 580);
  expect_counter(inner.second, 1, 2, 3);
  expect_counter(mr.get_bytes_counter(), 150, 650, 680);  // peak = max(100, 100 + 550)
  expect_counter(mr.get_allocations_counter(), 2, 3, 4);  // peak = max(1, 1 + 2)
  mr.deallocate(a, 100);
  mr.deallocate(b, 50);
  expect_counter(mr.get_bytes_counter(), 0, 650, 680);
}

TEST_F(stats_test, FreeingOuterMemoryInsideAScopeGoesNegativeThenBalances)
{
  stats mr{&base};
  void* a = mr.allocate(1000);
  mr.push_counters();
  mr.deallocate(a, 1000);
  expect_counter(mr.get_bytes_counter(), -1000, 0, 0);
  mr.pop_counters();
  expect_counter(mr.get_bytes_counter(), 0, 1000, 1000);
}

TEST_F(stats_test, PopWithoutPushThrowsOutOfRange)
{
  stats mr{&base};
  EXPECT_THROW(mr.pop_counters(), std::out_of_range);
  mr.push_counters();
  EXPECT_NO_THROW(mr.pop_counters());
  EXPECT_THROW(mr.pop_counters(), std::out_of_range);
  EXPECT_THROW((stats{static_cast<mr::cuda_memory_resource*>(nullptr)}), gpumem::logic_error);
}

TEST_F(stats_test, UpstreamFailureLeavesEveryCounterExact)
{
  stats mr{&base};
  void* a = mr.allocate(256);
  mr.push_counters();
  void* b = mr.allocate(512);
  rt.fail_next_allocations(2);
  EXPECT_THROW((void)mr.allocate(1024), gpumem::out_of_memory);
  EXPECT_THROW((void)mr.allocate(SIZE_MAX / 2), std::bad_alloc);
  expect_counter(mr.get_bytes_counter(), 512, 512, 512);
  expect_counter(mr.get_allocations_counter(), 1, 1, 1);
  EXPECT_NO_THROW(mr.check_invariants());
  mr.deallocate(b, 512);
  mr.pop_counters();
  expect_counter(mr.get_bytes_counter(), 256, 768, 768);
  expect_counter(mr.get_allocations_counter(), 1, 2, 2);
  mr.deallocate(a, 256);
  stats moved{std::move(mr)};
  expect_counter(moved.get_bytes_counter(), 0, 768, 768);
}

}  // namespace
}  // namespace gpumem::test
