// Every adaptor under misuse: a double free, a wrong size and a foreign pointer. The adaptor must
// not crash, its counters must stay consistent (never wrap, never go negative), the pool below
// must see the bad frees it can judge, and the stack must stay usable afterwards.
#include "adaptor_test_support.hpp"

#include <gpumem/mr/aligned_resource_adaptor.hpp>
#include <gpumem/mr/failure_callback_resource_adaptor.hpp>
#include <gpumem/mr/limiting_resource_adaptor.hpp>
#include <gpumem/mr/logging_resource_adaptor.hpp>
#include <gpumem/mr/owning_wrapper.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/prefetch_resource_adaptor.hpp>
#include <gpumem/mr/statistics_resource_adaptor.hpp>
#include <gpumem/mr/thread_safe_resource_adaptor.hpp>
#include <gpumem/mr/tracking_resource_adaptor.hpp>

#include <memory>
#include <typeinfo>
#include <sstream>
#include <vector>

namespace gpumem::test {
namespace {

using pool_t = mr::pool_memory_resource<mr::cuda_memory_resource>;

class adaptor_misuse : public host_upstream {
 protected:
  std::shared_ptr<pool_t> pool = std::make_shared<pool_t>(&base, 1 << 20, std::nullopt, rt);

  /// A double free and a foreign pointer through `r`: no crash, the pool counts both.
  void double_and_foreign_free(mr::device_memory_resource& r)
  {
    auto const bad_before = pool->bad_deallocations();
    void* a               = r.allocate(1000);
    r.deallocate(a, 1000);
    r.deallocate(a, 1000);  // double free
    alignas(256) static char foreign[256];
    r.deallocate(foreign, 256);  // never allocated here
    EXPECT_EQ(pool->bad_deallocations(), bad_before + 2);
  }

  /// The stack still allocates and frees after misuse.
  static void still_usable(mr::device_memory_resource& r)
  {
    std::vector<void*> blocks;
    for (std::size_t bytes : {256, 4096, 100000, 300000}) { blocks.push_back(r.allocate(bytes)); }
    std::size_t i = 0;
    for (std::size_t bytes : {256, 4096, 100000, 300000}) { r.deallocate(blocks[i++], bytes); }
  }
};

TEST_F(adaptor_misuse, LimitingChargeNeverWrapsAndWrongSizeFreesTheAllocation)
{
  mr::limiting_resource_adaptor<pool_t> r{pool.get(), 1 << 19};
  double_and_foreign_free(r);
  EXPECT_EQ(r.get_allocated_bytes(), 0U);
  EXPECT_EQ(r.untracked_deallocations(), 2U);
  auto const pool_bad = pool->bad_deallocations();
  void* b             = r.allocate(3000);
  r.deallocate(b, 5000);  // wrong size: freed as 3000, upstream sees the right size
  EXPECT_EQ(r.bad_deallocations(), 1U);
  EXPECT_EQ(pool->bad_deallocations(), pool_bad);
  EXPECT_EQ(r.get_allocated_bytes(), 0U);
  r.check_invariants();
  void* all = r.allocate(1 << 19);  // the whole limit is still there
  r.deallocate(all, 1 << 19);
  still_usable(r);
  EXPECT_EQ(r.get_allocated_bytes(), 0U);
}

TEST_F(adaptor_misuse, StatisticsNeverGoNegative)
{
  mr::statistics_resource_adaptor<pool_t> r{pool.get()};
  double_and_foreign_free(r);
  EXPECT_EQ(r.get_bytes_counter().value, 0);
  EXPECT_EQ(r.get_allocations_counter().value, 0);
  void* b = r.allocate(3000);
  r.deallocate(b, 100);  // wrong size: counted off as allocated
  EXPECT_EQ(r.bad_deallocations(), 1U);
  EXPECT_EQ(r.untracked_deallocations(), 2U);
  EXPECT_EQ(r.get_bytes_counter().value, 0);
  EXPECT_EQ(r.get_allocations_counter().value, 0);
  r.check_invariants();
  still_usable(r);
  EXPECT_EQ(r.get_bytes_counter().value, 0);
  EXPECT_EQ(r.get_bytes_counter().peak, 256 + 4096 + 100000 + 300000);
}

TEST_F(adaptor_misuse, TrackingFreesTheSizeItRecorded)
{
  mr::tracking_resource_adaptor<pool_t> r{pool.get()};
  double_and_foreign_free(r);
  auto const pool_bad = pool->bad_deallocations();
  void* b             = r.allocate(3000);
  r.deallocate(b, 7);
  EXPECT_EQ(r.bad_deallocations(), 1U);
  EXPECT_EQ(pool->bad_deallocations(), pool_bad);
  EXPECT_EQ(r.get_allocated_bytes(), 0U);
  r.check_invariants();
  still_usable(r);
}

TEST_F(adaptor_misuse, AlignedMatchesByPointerNotBySize)
{
  mr::aligned_resource_adaptor<pool_t> r{pool.get(), 4096, 2048};
  double_and_foreign_free(r);
  auto const pool_bad = pool->bad_deallocations();
  void* b             = r.allocate(3000);  // over-aligned
  r.deallocate(b, 100);                    // below the threshold: still found by its pointer
  EXPECT_EQ(r.bad_deallocations(), 1U);
  EXPECT_EQ(pool->bad_deallocations(), pool_bad);
  EXPECT_THROW((void)r.allocate(SIZE_MAX - 100), gpumem::out_of_memory);  // padding overflows
  still_usable(r);
}

TEST_F(adaptor_misuse, PassThroughAdaptorsLetThePoolJudge)
{
  std::ostringstream log;
  mr::logging_resource_adaptor<pool_t> logging{pool.get(), log};
  mr::failure_callback_resource_adaptor<pool_t> callback{
      pool.get(), [](std::size_t, void*) { return false; }, nullptr};
  mr::thread_safe_resource_adaptor<pool_t> thread_safe{pool.get()};
  mr::prefetch_resource_adaptor<pool_t> prefetch{pool.get(), rt};
  auto owning = mr::make_owning_wrapper<mr::statistics_resource_adaptor>(pool);
  for (mr::device_memory_resource* r : std::vector<mr::device_memory_resource*>{
           &logging, &callback, &thread_safe, &prefetch, owning.get()}) {
    SCOPED_TRACE(typeid(*r).name());
    double_and_foreign_free(*r);
    void* b = r->allocate(3000);
    r->deallocate(b, 3000);
    still_usable(*r);
  }
  logging.flush();
  EXPECT_NE(log.str().find(",free,"), std::string::npos);
}

}  // namespace
}  // namespace gpumem::test
