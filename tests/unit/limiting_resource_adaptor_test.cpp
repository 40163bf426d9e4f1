// limiting_resource_adaptor: accounting, the limit, failure paths, concurrency never over limit.
#include "adaptor_test_support.hpp"

#include <gpumem/mr/limiting_resource_adaptor.hpp>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

using limiting      = mr::limiting_resource_adaptor<mr::cuda_memory_resource>;
using limiting_test = host_upstream;

TEST_F(limiting_test, ChargesAlignedBytesAndReportsTheLimit)
{
  limiting mr{&base, 10000};
  EXPECT_EQ(mr.get_allocation_limit(), 10000u);
  void* a = mr.allocate(100);
  EXPECT_EQ(mr.get_allocated_bytes(), 256u);
  limiting fine{&base, 10000, 8};
  void* b = fine.allocate(100);
  EXPECT_EQ(fine.get_allocated_bytes(), 104u);
  fine.deallocate(b, 100);
  mr.deallocate(a, 100);
  EXPECT_EQ(mr.get_allocated_bytes(), 0u);
  EXPECT_EQ(fine.get_allocated_bytes(), 0u);
  EXPECT_THROW((limiting{&base, 100, 48}), gpumem::logic_error);
  EXPECT_THROW((limiting{static_cast<mr::cuda_memory_resource*>(nullptr), 100}),
               gpumem::logic_error);
}

TEST_F(limiting_test, OverTheLimitThrowsWithoutAskingUpstream)
{
  limiting mr{device_async_resource_ref{base}, 4096};
  void* a          = mr.allocate(4000);
  auto const calls = rt.calls().allocate;
  try {
    (void)mr.allocate(200);
    FAIL() << "no throw";
  } catch (gpumem::out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find("4096"), std::string::npos) << what;  // allocated and limit named
  }
  EXPECT_THROW((void)mr.allocate(SIZE_MAX), gpumem::out_of_memory);
  EXPECT_EQ(rt.calls().allocate, calls);
  EXPECT_EQ(mr.get_allocated_bytes(), 4096u);
  mr.deallocate(a, 4000);
  void* b = mr.allocate(4096);  // exactly the limit fits
  mr.deallocate(b, 4096);
  EXPECT_EQ(mr.get_allocated_bytes(), 0u);
}

TEST_F(limiting_test, UpstreamFailureGivesTheChargeBack)
{
  limiting mr{&base, 1 << 20};
  void* a = mr.allocate(1000);
  rt.fail_next_allocations(3);
  for (int i = 0; i < 3; ++i) { EXPECT_THROW((void)mr.allocate(5000), gpumem::out_of_memory); }
  EXPECT_EQ(mr.get_allocated_bytes(), 1024u);
  EXPECT_NO_THROW(mr.check_invariants());
  mr.deallocate(a, 1000);
  EXPECT_EQ(mr.get_allocated_bytes(), 0u);
}

void update_max(std::atomic<std::size_t>& max, std::size_t value)
{
  auto seen = max.load();
  while (value > seen && !max.compare_exchange_weak(seen, value)) {}
}

// 8 threads each keep up to 20 blocks of 4 KiB live (one thread alone passes the 64 KiB limit);
// a refused thread gives one block back.
TEST_F(limiting_test, ConcurrentAllocationNeverExceedsTheLimit)
{
  constexpr std::size_t limit = 64 * 1024;
  limiting mr{&base, limit};
  std::atomic<std::size_t> live{0};  // bytes handed out and not yet given back
  std::atomic<std::size_t> max_live{0};
  std::atomic<std::size_t> max_charged{0};
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      std::vector<void*> mine;
      for (int i = 0; i < 400; ++i) {
        bool give_back = mine.size() == 20;
        try {
          mine.push_back(mr.allocate(4096));
          update_max(max_live, live += 4096);
        } catch (gpumem::out_of_memory const&) {
          ++refused;
          give_back = true;
        }
        update_max(max_charged, mr.get_allocated_bytes());
        if (give_back && !mine.empty()) {
          live -= 4096;
          mr.deallocate(mine.back(), 4096);
          mine.pop_back();
        }
      }
      for (void* p : mine) {
        live -= 4096;
        mr.deallocate(p, 4096);
      }
    });
  }
  for (auto& t : threads) { t.join(); }
  EXPECT_LE(max_live.load(), limit);
  EXPECT_LE(max_charged.load(), limit);
  EXPECT_GT(refused.load(), 0) << "the test never reached the limit";
  EXPECT_EQ(mr.get_allocated_bytes(), 0u);
  EXPECT_EQ(rt.used_bytes(), 0u);
}

TEST_F(limiting_test, MovedAdaptorKeepsItsAccounting)
{
  limiting a{&base, 1 << 20};
  void* p = a.allocate(512);
  limiting b{std::move(a)};
  EXPECT_EQ(b.get_allocated_bytes(), 512u);
  b.deallocate(p, 512);
  EXPECT_EQ(b.get_allocated_bytes(), 0u);
}

}  // namespace
}  // namespace gpumem::test
