// White-box tests of binning_memory_resource: bin selection, add_bin, the exponent constructor,
// upstream for larger sizes.
#include "suballocator_test_helpers.hpp"

#include <gpumem/mr/binning_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>

namespace gpumem::test {
namespace {

using binning_mr = mr::binning_memory_resource<mr::cuda_memory_resource>;
using pool_mr    = mr::pool_memory_resource<mr::cuda_memory_resource>;

TEST(binning, WithoutBinsEverythingGoesUpstream)
{
  host_upstream up;
  binning_mr bin{&up.cuda, up.rt};
  EXPECT_TRUE(bin.get_upstream_resource() == device_async_resource_ref{up.cuda});
  auto const before = up.rt.calls().allocate;
  void* p           = bin.allocate(1000);
  EXPECT_EQ(up.rt.calls().allocate, before + 1);
  bin.deallocate(p, 1000);
  EXPECT_EQ(up.rt.live_allocations(), 0U);
}

TEST(binning, ExponentRangeMakesOneFixedSizeBinPerPowerOfTwo)
{
  host_upstream up{false};
  binning_mr bin{&up.cuda, std::int8_t{10}, std::int8_t{12}, up.rt};
  EXPECT_EQ(up.rt.live_allocations(), 3U);  // bins of 1, 2 and 4 KiB, preallocated
  auto const upstream = device_async_resource_ref{up.cuda};
  EXPECT_FALSE(bin.get_resource_ref(1) == upstream);
  EXPECT_TRUE(bin.get_resource_ref(1024) == bin.get_resource_ref(1));
  EXPECT_FALSE(bin.get_resource_ref(1025) == bin.get_resource_ref(1024));
  EXPECT_TRUE(bin.get_resource_ref(3000) == bin.get_resource_ref(4096));
  EXPECT_TRUE(bin.get_resource_ref(4097) == upstream);
  void* small = bin.allocate(3000);
  void* large = bin.allocate(5000);
  EXPECT_EQ(up.rt.live_allocations(), 4U);  // only the large one went upstream
  bin.deallocate(small, 3000);
  bin.deallocate(large, 5000);
  bin.check_invariants();
}

TEST(binning, AddBinUsesAGivenResourceAndIgnoresDuplicates)
{
  host_upstream up;
  pool_mr pool{&up.cuda, MiB, std::nullopt, up.rt};
  binning_mr bin{&up.cuda, up.rt};
  bin.add_bin(1000, device_async_resource_ref{pool});  // rounded to 1024
  bin.add_bin(1024);                                   // exists: no change
  EXPECT_TRUE(bin.get_resource_ref(1024) == device_async_resource_ref{pool});
  void* p = bin.allocate(700);
  EXPECT_EQ(pool.get_free_stats().free_bytes, MiB - 768);
  bin.deallocate(p, 700);
  bin.add_bin(64 * KiB);  // an owned fixed_size bin
  EXPECT_FALSE(bin.get_resource_ref(2000) == device_async_resource_ref{pool});
  bin.check_invariants();
}

TEST(binning, RejectsNullUpstreamAndBadExponents)
{
  host_upstream up;
  EXPECT_THROW(binning_mr(static_cast<mr::cuda_memory_resource*>(nullptr)), gpumem::logic_error);
  EXPECT_THROW(binning_mr(&up.cuda, std::int8_t{12}, std::int8_t{10}, up.rt), gpumem::logic_error);
  EXPECT_THROW(binning_mr(&up.cuda, std::int8_t{-1}, std::int8_t{10}, up.rt), gpumem::logic_error);
  EXPECT_THROW(binning_mr(&up.cuda, std::int8_t{10}, std::int8_t{63}, up.rt), gpumem::logic_error);
}

// Wrong-size frees were counted nowhere: the block reached another bin (or upstream) by its
// wrong size. Now they are reported, counted in bad_deallocations(), and the block goes back to
// the bin that handed it out.
TEST(binning, WrongSizeFreesAreCountedAndFreedIntoTheirOwnBin)
{
  host_upstream up{false};
  binning_mr bin{&up.cuda, std::int8_t{10}, std::int8_t{12}, up.rt};
  void* small = bin.allocate(1000);  // the 1 KiB bin
  void* mid   = bin.allocate(3000);  // the 4 KiB bin
  ::testing::internal::CaptureStderr();
  bin.deallocate(small, 4000);     // 4 KiB bin's size: goes back to the 1 KiB bin
  bin.deallocate(mid, 100 * KiB);  // upstream's size: goes back to the 4 KiB bin
  bin.deallocate(mid, 3000);       // double free: no bin holds it
  auto const text = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(bin.bad_deallocations(), 3U);
  EXPECT_NE(text.find("size differs from the allocation"), std::string::npos) << text;
  EXPECT_NE(text.find("not handed out by any of its bins"), std::string::npos) << text;
  bin.check_invariants();
  EXPECT_EQ(bin.allocate(1000), small);  // reusable where it belongs
  EXPECT_EQ(bin.allocate(3000), mid);
  bin.deallocate(small, 1000);
  bin.deallocate(mid, 3000);
  EXPECT_EQ(bin.bad_deallocations(), 3U);
}

// A free goes where the pointer came from whichever resource its size names: an owned bin's
// block freed with a given bin's size is found by asking the owned bins, each once; the given
// bin's and upstream's pointers reach their resource with nothing reported.
TEST(binning, FreesReachTheResourceThatHandedThePointerOut)
{
  host_upstream up{false};
  pool_mr pool{&up.cuda, MiB, std::nullopt, up.rt};
  binning_mr bin{&up.cuda, up.rt};
  bin.add_bin(KiB);                                       // owned
  bin.add_bin(4 * KiB, device_async_resource_ref{pool});  // given
  bin.add_bin(16 * KiB);                                  // owned
  void* owned = bin.allocate(KiB);
  void* given = bin.allocate(3 * KiB);
  void* large = bin.allocate(64 * KiB);  // upstream
  ::testing::internal::CaptureStderr();
  bin.deallocate(given, 3 * KiB);
  bin.deallocate(large, 64 * KiB);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(bin.bad_deallocations(), 0U);
  EXPECT_EQ(pool.get_free_stats().free_bytes, MiB);
  ::testing::internal::CaptureStderr();
  bin.deallocate(owned, 3 * KiB);  // the given bin's size: found in the 1 KiB bin
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("1024-byte bin"), std::string::npos);
  EXPECT_EQ(bin.bad_deallocations(), 1U);
  EXPECT_EQ(pool.get_free_stats().free_bytes, MiB);  // the pool was not asked to free it
  bin.check_invariants();
  EXPECT_EQ(bin.allocate(KiB), owned);  // back in its own bin
  bin.deallocate(owned, KiB);
}

TEST(binning, ReleasesEverythingUpstream)
{
  host_upstream up{false};
  {
    binning_mr bin{&up.cuda, std::int8_t{8}, std::int8_t{20}, up.rt};
    for (std::size_t n = 1; n <= MiB; n *= 3) { (void)bin.allocate(n); }  // leaked into bins
  }
  EXPECT_EQ(up.rt.live_allocations(), 0U);
}

}  // namespace
}  // namespace gpumem::test
