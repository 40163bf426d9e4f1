// White-box tests of the caching allocator (seed 003): bin math, caching limits, stream rules,
// multi-device, debug output, bad input — for the drop-in class and the memory resource.
#include <gpumem/caching_device_allocator.hpp>
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/caching_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>

#include <gtest/gtest.h>

#include <sstream>
#include <thread>

namespace gpumem::test {
namespace {

using detail::caching::bin_layout;
using detail::caching::invalid_bin;
constexpr std::size_t MiB = std::size_t{1} << 20;

detail::host_runtime_options simulated(std::size_t capacity = std::size_t{1} << 30, int devices = 1)
{
  detail::host_runtime_options o;
  o.backed         = false;
  o.capacity_bytes = capacity;
  o.device_count   = devices;
  return o;
}

TEST(caching_bins, DefaultsDelineateFiveBinsAndRoundOrPassThrough)
{
  detail::host_runtime rt{simulated()};
  CachingDeviceAllocator a{false, false, rt};
  EXPECT_EQ(a.bin_growth, 8U);
  EXPECT_EQ(a.min_bin, 3U);
  EXPECT_EQ(a.max_bin, 7U);
  EXPECT_EQ(a.min_bin_bytes, 512U);
  EXPECT_EQ(a.max_bin_bytes, 2U * MiB);
  EXPECT_EQ(a.max_cached_bytes, 6'291'455U);
  bin_layout const l{8, 3, 7};
  EXPECT_EQ(l.bin_count(), 5U);
  std::size_t const expect[] = {512, 4096, 32768, 262144, 2097152};
  for (unsigned b = 3; b <= 7; ++b) { EXPECT_EQ(l.bin_bytes(b), expect[b - 3]); }
  auto check = [&](std::size_t bytes, unsigned bin, std::size_t rounded) {
    auto const c = l.classify(bytes);
    EXPECT_EQ(c.bin, bin) << bytes;
    EXPECT_EQ(c.bytes, rounded) << bytes;
  };
  check(0, 3, 512);
  check(1, 3, 512);  // below the smallest bin: rounded up to it
  check(512, 3, 512);
  check(513, 4, 4096);
  check(4097, 5, 32768);
  check(2 * MiB, 7, 2 * MiB);
  check(2 * MiB + 1, invalid_bin, 2 * MiB + 1);  // above the largest: exact, no bin
  check(SIZE_MAX, invalid_bin, SIZE_MAX);
  EXPECT_EQ(CachingDeviceAllocator::IntPow(8, 7), 2097152U);
  unsigned power{};
  std::size_t rounded{};
  a.NearestPowerOf(power, rounded, 8, 4097);
  EXPECT_EQ(power, 5U);
  EXPECT_EQ(rounded, 32768U);
}

TEST(caching_bins, ExplicitLayoutsAndBadLayouts)
{
  detail::host_runtime rt{simulated()};
  CachingDeviceAllocator a{
      2,     1, CachingDeviceAllocator::INVALID_BIN, CachingDeviceAllocator::INVALID_SIZE, false,
      false, rt};
  EXPECT_EQ(a.min_bin_bytes, 2U);
  EXPECT_EQ(a.max_bin_bytes, CachingDeviceAllocator::INVALID_SIZE);
  EXPECT_EQ(bin_layout(2, 1, invalid_bin).classify(3 * MiB).bytes, 4 * MiB);  // no maximum bin
  EXPECT_THROW(bin_layout(1, 0, 3), gpumem::logic_error);
  EXPECT_THROW(bin_layout(8, 5, 3), gpumem::logic_error);
  EXPECT_THROW(bin_layout(8, 3, 40), gpumem::logic_error);  // 8^40 does not fit
}

class caching_test : public ::testing::Test {
 protected:
  void TearDown() override { a_.check_invariants(); }
  void* alloc(std::size_t n, cudaStream_t s = nullptr)
  {
    void* p{};
    EXPECT_EQ(a_.DeviceAllocate(&p, n, s), cudaSuccess);
    return p;
  }

  detail::host_runtime rt_{simulated()};
  CachingDeviceAllocator a_{false, false, rt_};
  cudaStream_t s1_{rt_.create_stream()};
  cudaStream_t s2_{rt_.create_stream()};
};

TEST_F(caching_test, RoundsUpCachesAndPassesLargeRequestsThrough)
{
  void* p = alloc(1);
  EXPECT_EQ(a_.live_blocks().begin()->bytes, 512U);
  EXPECT_EQ(a_.DeviceFree(p), cudaSuccess);
  EXPECT_EQ(a_.cached_bytes()[0].free, 512U);
  EXPECT_EQ(alloc(300), p);  // same bin, same stream: reused
  EXPECT_EQ(a_.DeviceFree(p), cudaSuccess);
  void* big = alloc(3 * MiB);
  EXPECT_EQ(rt_.live_allocations(), 2U);
  EXPECT_EQ(a_.DeviceFree(big), cudaSuccess);
  EXPECT_EQ(rt_.live_allocations(), 1U);  // pass-through: freed, not cached
  EXPECT_EQ(a_.cached_blocks().size(), 1U);
}

TEST_F(caching_test, CachesOnlyWithinMaxCachedBytesPerDevice)
{
  void* p[3] = {alloc(2 * MiB), alloc(2 * MiB), alloc(2 * MiB)};
  for (void* x : p) { EXPECT_EQ(a_.DeviceFree(x), cudaSuccess); }
  EXPECT_EQ(a_.cached_bytes()[0].free, 4 * MiB);  // a third 2 MiB would exceed 6 MiB - 1
  EXPECT_EQ(rt_.live_allocations(), 2U);
  EXPECT_EQ(a_.SetMaxCachedBytes(0), cudaSuccess);
  EXPECT_EQ(a_.max_cached_bytes, 0U);
  EXPECT_EQ(a_.cached_bytes()[0].free, 4 * MiB);  // lowering the limit frees nothing
  void* q = alloc(4096);
  EXPECT_EQ(a_.DeviceFree(q), cudaSuccess);
  EXPECT_EQ(a_.cached_bytes()[0].free, 4 * MiB);  // but nothing more is cached
  EXPECT_EQ(a_.FreeAllCached(), cudaSuccess);
  EXPECT_EQ(rt_.live_allocations(), 0U);
}

TEST_F(caching_test, ReusesOnOtherStreamsOnlyAfterTheirWorkCompleted)
{
  void* p = alloc(1000, s1_);
  rt_.enqueue(s1_);  // s1 still uses p
  EXPECT_EQ(a_.DeviceFree(p), cudaSuccess);
  EXPECT_EQ(alloc(1000, s1_), p);  // the same stream: at once
  EXPECT_EQ(a_.DeviceFree(p), cudaSuccess);
  void* q = alloc(1000, s2_);
  EXPECT_NE(q, p);  // another stream: not while s1 is busy
  rt_.complete(s1_);
  void* r = alloc(1000, s2_);
  EXPECT_EQ(r, p);  // now it may
  EXPECT_EQ(a_.DeviceFree(q), cudaSuccess);
  EXPECT_EQ(a_.DeviceFree(r), cudaSuccess);
}

TEST_F(caching_test, PerThreadDefaultStreamsOfDifferentThreadsAreDifferentStreams)
{
  void* p = alloc(1000, cudaStreamPerThread);
  rt_.enqueue(cudaStreamPerThread);
  EXPECT_EQ(a_.DeviceFree(p), cudaSuccess);
  void* q = nullptr;
  std::thread{[&] { q = alloc(1000, cudaStreamPerThread); }}.join();
  EXPECT_NE(q, p);
  EXPECT_EQ(alloc(1000, cudaStreamPerThread), p);
  EXPECT_EQ(a_.DeviceFree(p), cudaSuccess);
  EXPECT_EQ(a_.DeviceFree(q), cudaSuccess);
}

TEST_F(caching_test, FreeAllCachedReturnsEverythingCachedUpstream)
{
  void* keep = alloc(100);
  for (std::size_t n : {std::size_t{100}, std::size_t{5000}, std::size_t{40000}, MiB}) {
    EXPECT_EQ(a_.DeviceFree(alloc(n)), cudaSuccess);
  }
  EXPECT_EQ(rt_.live_allocations(), 5U);
  EXPECT_EQ(a_.FreeAllCached(), cudaSuccess);
  EXPECT_EQ(rt_.live_allocations(), 1U);  // only the live block remains
  EXPECT_EQ(a_.cached_bytes()[0].free, 0U);
  EXPECT_EQ(a_.cached_bytes()[0].live, 512U);
  EXPECT_EQ(a_.DeviceFree(keep), cudaSuccess);
}

TEST_F(caching_test, UnknownPointersAndDoubleFreesAreRejected)
{
  int local{};
  EXPECT_EQ(a_.DeviceFree(&local), cudaErrorInvalidValue);
  void* p = alloc(1000);
  EXPECT_EQ(a_.DeviceFree(p), cudaSuccess);
  EXPECT_EQ(a_.DeviceFree(p), cudaErrorInvalidValue);
  EXPECT_EQ(a_.DeviceFree(nullptr), cudaSuccess);
  EXPECT_EQ(a_.DeviceAllocate(nullptr, 10), cudaErrorInvalidValue);
  EXPECT_EQ(a_.cached_bytes()[0].free, 4096U);
  EXPECT_EQ(rt_.live_allocations(), 1U);
}

TEST(caching_out_of_memory, ReleasesTheCacheAndRetriesOnce)
{
  detail::host_runtime rt{simulated(8 * MiB)};
  CachingDeviceAllocator a{false, false, rt};
  void* p[2]{};
  for (auto& x : p) { ASSERT_EQ(a.DeviceAllocate(&x, 2 * MiB), cudaSuccess); }
  for (auto* x : p) { ASSERT_EQ(a.DeviceFree(x), cudaSuccess); }
  void* big{};
  EXPECT_EQ(a.DeviceAllocate(&big, 6 * MiB), cudaSuccess);  // fits only once the cache is freed
  EXPECT_EQ(a.cached_bytes()[0].free, 0U);
  void* huge{};
  EXPECT_EQ(a.DeviceAllocate(&huge, 64 * MiB), cudaErrorMemoryAllocation);
  EXPECT_EQ(huge, nullptr);
  EXPECT_EQ(a.DeviceFree(big), cudaSuccess);
  a.check_invariants();
}

TEST(caching_devices, CachesPerDeviceAndRestoresTheCurrentDevice)
{
  detail::host_runtime rt{simulated(std::size_t{1} << 30, 2)};
  CachingDeviceAllocator a{false, false, rt};
  void* p{};
  ASSERT_EQ(a.DeviceAllocate(1, &p, 1000), cudaSuccess);
  EXPECT_EQ(rt.current_device(), 0);
  EXPECT_EQ(a.cached_bytes()[1].live, 4096U);
  EXPECT_EQ(a.cached_bytes().count(0), 0U);
  EXPECT_EQ(a.DeviceFree(0, p), cudaErrorInvalidValue);  // not a block of device 0
  EXPECT_EQ(a.DeviceFree(1, p), cudaSuccess);
  EXPECT_EQ(a.cached_bytes()[1].free, 4096U);
  rt.set_device(1);
  ASSERT_EQ(a.DeviceAllocate(&p, 1000), cudaSuccess);
  EXPECT_EQ(a.cached_bytes()[1].free, 0U);  // current device 1: its cached block reused
  EXPECT_EQ(a.DeviceFree(p), cudaSuccess);
  rt.set_device(0);
  void* q{};
  EXPECT_EQ(a.DeviceAllocate(5, &q, 10), cudaErrorInvalidDevice);
  a.check_invariants();
}

TEST(caching_debug, PrintsAllocationEventsWhenAsked)
{
  detail::host_runtime rt{simulated()};
  CachingDeviceAllocator a{false, true, rt};
  std::ostringstream out;
  a.set_debug_stream(out);
  void* p{};
  ASSERT_EQ(a.DeviceAllocate(&p, 1000), cudaSuccess);
  ASSERT_EQ(a.DeviceFree(p), cudaSuccess);
  ASSERT_EQ(a.DeviceAllocate(&p, 1000), cudaSuccess);
  ASSERT_EQ(a.DeviceFree(p), cudaSuccess);
  ASSERT_EQ(a.SetMaxCachedBytes(10), cudaSuccess);
  ASSERT_EQ(a.FreeAllCached(), cudaSuccess);
  for (char const* needle :
       {"allocated new block", "returned block to the cache", "reused cached block",
        "Changing max_cached_bytes", "freeing 1 cached"}) {
    EXPECT_NE(out.str().find(needle), std::string::npos) << needle << " missing in\n" << out.str();
  }
  a.debug = false;
  out.str("");
  ASSERT_EQ(a.DeviceAllocate(&p, 1000), cudaSuccess);
  EXPECT_TRUE(out.str().empty());
  ASSERT_EQ(a.DeviceFree(p), cudaSuccess);
}

TEST(caching_memory_resource_test, FreeStreamBecomesTheReuseStreamAndBadFreesAreReported)
{
  detail::host_runtime rt{simulated()};
  mr::cuda_memory_resource up{rt};
  mr::caching_memory_resource mr{&up, {}, rt};
  auto s1 = rt.create_stream();
  auto s2 = rt.create_stream();
  void* p = mr.allocate(1000, s1);
  rt.enqueue(s2);
  mr.deallocate(p, 1000, s2);  // may be reused at once on s2, not on s1 while s2 is busy
  void* q = mr.allocate(1000, s1);
  EXPECT_NE(q, p);
  EXPECT_EQ(mr.allocate(1000, s2), p);
  EXPECT_EQ(mr.cached_bytes().live, 2 * 4096U);
  ::testing::internal::CaptureStderr();
  mr.deallocate(p, 100000, s2);  // wrong size: freed with its own
  mr.deallocate(p, 1000, s2);    // double free: ignored
  auto const text = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(mr.bad_deallocations(), 2U);
  EXPECT_NE(text.find("wrong size"), std::string::npos) << text;
  EXPECT_NE(text.find("double free"), std::string::npos) << text;
  mr.deallocate(q, 1000, s1);
  mr.check_invariants();
  mr.free_all_cached();
  EXPECT_EQ(rt.live_allocations(), 0U);
  EXPECT_THROW(mr::caching_memory_resource(static_cast<mr::cuda_memory_resource*>(nullptr)),
               gpumem::logic_error);
}

TEST(caching_memory_resource_test, UnboundedPowerOfTwoBinsCacheEverySize)
{
  detail::host_runtime rt{simulated()};
  mr::cuda_memory_resource up{rt};
  mr::caching_memory_resource mr{&up, {2, 1, invalid_bin, detail::caching::invalid_size}, rt};
  void* p = mr.allocate(3 * MiB);
  EXPECT_EQ(mr.cached_bytes().live, 4 * MiB);  // rounded to the next power of two
  mr.deallocate(p, 3 * MiB);
  EXPECT_EQ(mr.cached_bytes().free, 4 * MiB);  // cached, not passed through
  EXPECT_EQ(mr.allocate(4 * MiB - 5), p);
  mr.deallocate(p, 4 * MiB - 5);
  mr.check_invariants();
}

}  // namespace
}  // namespace gpumem::test
