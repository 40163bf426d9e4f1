// White-box tests of the caching allocator (CUB's CachingDeviceAllocator semantics): bin math,
// caching limits, stream rules, multi-device, debug output, bad input — for the drop-in class and
// the memory resource.
#include <gpumem/caching_device_allocator.hpp>
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/caching_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>

#include <gtest/gtest.h>

#include <sstream>
#include <thread>
#include <type_traits>
#include <vector>

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

// -- CUB's public fields, as code written against CUB uses them
// ------------------------------------ Writes to the configuration fields, skip_cleanup and the
// bookkeeping views do not compile: see tests/compile_fail/caching_*.cpp (each with a control
// variant that compiles).

TEST(caching_fields, ConfigurationFieldsReadAsTheSeedsIntegers)
{
  detail::host_runtime rt{simulated()};
  CachingDeviceAllocator a{4, 2, 6, 100000, true, false, rt};
  unsigned int const growth = a.bin_growth;  // CUB code reads them as plain integers
  unsigned int const lo     = a.min_bin;
  unsigned int const hi     = a.max_bin;
  std::size_t const lo_b    = a.min_bin_bytes;
  std::size_t const hi_b    = a.max_bin_bytes;
  std::size_t const limit   = a.max_cached_bytes;
  bool const skip           = a.skip_cleanup;
  bool const dbg            = a.debug;
  EXPECT_EQ(growth, 4U);
  EXPECT_EQ(lo, 2U);
  EXPECT_EQ(hi, 6U);
  EXPECT_EQ(lo_b, 16U);
  EXPECT_EQ(hi_b, 4096U);
  EXPECT_EQ(limit, 100000U);
  EXPECT_TRUE(skip);
  EXPECT_FALSE(dbg);
  EXPECT_EQ(a.bin_growth * a.min_bin_bytes, 64U);  // arithmetic as on CUB's fields
  std::ostringstream text;
  text << a.bin_growth << ' ' << a.max_bin_bytes;
  EXPECT_EQ(text.str(), "4 4096");
  static_assert(std::is_same_v<decltype(a.skip_cleanup), bool const>);  // as CUB declares it
}

TEST(caching_fields, MaxCachedBytesWriteTakesEffectLikeSetMaxCachedBytes)
{
  detail::host_runtime rt{simulated()};
  CachingDeviceAllocator a{false, false, rt};
  a.max_cached_bytes = 4096;  // CUB code may write the field instead of SetMaxCachedBytes
  EXPECT_EQ(a.max_cached_bytes, 4096U);
  void* p[3]{};
  for (auto& x : p) { ASSERT_EQ(a.DeviceAllocate(&x, 4096), cudaSuccess); }
  ASSERT_EQ(a.DeviceFree(p[0]), cudaSuccess);
  ASSERT_EQ(a.DeviceFree(p[1]), cudaSuccess);  // 8192 would exceed 4096: freed
  EXPECT_EQ(a.cached_bytes[0].free, 4096U);
  EXPECT_EQ(rt.live_allocations(), 2U);
  a.max_cached_bytes += 4096;  // now 8192: the next free is cached
  EXPECT_EQ(a.max_cached_bytes, 8192U);
  ASSERT_EQ(a.DeviceFree(p[2]), cudaSuccess);
  EXPECT_EQ(a.cached_bytes[0].free, 8192U);
  EXPECT_EQ(rt.live_allocations(), 2U);
  ASSERT_EQ(a.SetMaxCachedBytes(123), cudaSuccess);  // and the field reads what was set
  EXPECT_EQ(a.max_cached_bytes, 123U);
  a.max_cached_bytes -= 23;
  EXPECT_EQ(a.max_cached_bytes, 100U);
  EXPECT_EQ(a.cached_bytes[0].free, 8192U);  // lowering the limit frees nothing (seed)
  CachingDeviceAllocator b{false, false, rt};
  b.max_cached_bytes = a.max_cached_bytes;  // copies the value, not the field
  EXPECT_EQ(b.max_cached_bytes, 100U);
  a.max_cached_bytes = 0;
  EXPECT_EQ(b.max_cached_bytes, 100U);
  a.check_invariants();
}

TEST(caching_fields, DebugWriteTakesEffectForTheNextCallOnAnyThread)
{
  detail::host_runtime rt{simulated()};
  CachingDeviceAllocator a{false, false, rt};
  std::ostringstream out;
  a.set_debug_stream(out);
  void* p{};
  ASSERT_EQ(a.DeviceAllocate(&p, 100), cudaSuccess);
  EXPECT_TRUE(out.str().empty());
  a.debug = true;
  EXPECT_TRUE(a.debug);
  ASSERT_EQ(a.DeviceFree(p), cudaSuccess);
  EXPECT_NE(out.str().find("returned block to the cache"), std::string::npos) << out.str();
  std::thread{[&] { a.debug = false; }}.join();
  EXPECT_FALSE(a.debug);
  out.str("");
  ASSERT_EQ(a.DeviceAllocate(&p, 100), cudaSuccess);
  ASSERT_EQ(a.DeviceFree(p), cudaSuccess);
  EXPECT_TRUE(out.str().empty()) << out.str();
}

TEST(caching_fields, BookkeepingViewsReadAsTheSeedsContainers)
{
  detail::host_runtime rt{simulated(std::size_t{1} << 30, 2)};
  CachingDeviceAllocator a{false, false, rt};
  EXPECT_TRUE(a.cached_bytes.empty());
  EXPECT_TRUE(a.cached_blocks.empty());
  EXPECT_TRUE(a.live_blocks.empty());
  void *p{}, *q{}, *r{};
  ASSERT_EQ(a.DeviceAllocate(0, &p, 100), cudaSuccess);
  ASSERT_EQ(a.DeviceAllocate(0, &q, 5000), cudaSuccess);
  ASSERT_EQ(a.DeviceAllocate(1, &r, 100), cudaSuccess);
  ASSERT_EQ(a.DeviceFree(0, q), cudaSuccess);
  EXPECT_EQ(a.cached_bytes.size(), 2U);
  EXPECT_EQ(a.cached_bytes.count(0), 1U);
  EXPECT_EQ(a.cached_bytes.count(5), 0U);
  EXPECT_EQ(a.cached_bytes[0].free, 32768U);
  EXPECT_EQ(a.cached_bytes[0].live, 512U);
  EXPECT_EQ(a.cached_bytes[1].free, 0U);
  EXPECT_EQ(a.cached_bytes[1].live, 512U);
  EXPECT_EQ(a.cached_bytes[5].live, 0U);  // a device never used reads {0, 0}, as a map would
  EXPECT_EQ(a.cached_blocks.size(), 1U);
  EXPECT_EQ(a.live_blocks.size(), 2U);
  auto const cached = a.cached_blocks();  // a snapshot to iterate
  EXPECT_EQ(cached.begin()->d_ptr, q);
  EXPECT_EQ(cached.begin()->bytes, 32768U);
  EXPECT_EQ(cached.begin()->bin, 5U);
  EXPECT_EQ(cached.begin()->device, 0);
  auto const live = a.live_blocks();
  std::size_t devices_seen{};
  for (auto const& b : live) { devices_seen += static_cast<std::size_t>(b.device) + 1; }
  EXPECT_EQ(devices_seen, 3U);  // one block on device 0, one on device 1
  ASSERT_EQ(a.DeviceFree(0, p), cudaSuccess);
  ASSERT_EQ(a.DeviceFree(1, r), cudaSuccess);
  a.check_invariants();
}

// -- behaviours of CUB's allocator not run
// elsewhere-------------------------------------------------

TEST(caching_cleanup, DestructorFreesCachedBlocksButNotLiveOnes)
{
  detail::host_runtime rt{simulated()};
  void* kept{};
  {
    CachingDeviceAllocator a{false, false, rt};
    void* p[3]{};
    ASSERT_EQ(a.DeviceAllocate(&p[0], 100), cudaSuccess);
    ASSERT_EQ(a.DeviceAllocate(&p[1], 5000), cudaSuccess);
    ASSERT_EQ(a.DeviceAllocate(&p[2], 300000), cudaSuccess);
    ASSERT_EQ(a.DeviceAllocate(&kept, 100), cudaSuccess);
    for (void* x : p) { ASSERT_EQ(a.DeviceFree(x), cudaSuccess); }
    EXPECT_EQ(a.cached_blocks.size(), 3U);
    EXPECT_EQ(rt.live_allocations(), 4U);
  }  // skip_cleanup false: the destructor calls FreeAllCached()
  EXPECT_EQ(rt.live_allocations(), 1U) << "the live block is the caller's: not freed (seed)";
  rt.free(detail::memory_kind::device, kept);
  EXPECT_EQ(rt.live_allocations(), 0U);
}

TEST(caching_cleanup, SkipCleanupLeavesCachedBlocksToTheRuntime)
{
  detail::host_runtime rt{simulated()};
  std::vector<void*> cached;
  {
    CachingDeviceAllocator a{true, false, rt};
    EXPECT_TRUE(a.skip_cleanup);
    for (std::size_t n : {std::size_t{100}, std::size_t{5000}, std::size_t{40000}}) {
      void* p{};
      ASSERT_EQ(a.DeviceAllocate(&p, n), cudaSuccess);
      cached.push_back(p);
    }
    for (void* p : cached) { ASSERT_EQ(a.DeviceFree(p), cudaSuccess); }
    EXPECT_EQ(a.cached_bytes[0].free, 512U + 32768U + 262144U);
  }  // skip_cleanup true: no FreeAllCached() (the runtime may be gone for static allocators)
  EXPECT_EQ(rt.live_allocations(), 3U);
  EXPECT_EQ(rt.used_bytes(), 512U + 32768U + 262144U);
  for (void* p : cached) { rt.free(detail::memory_kind::device, p); }
}

TEST(caching_cleanup, SkipCleanupAllocatorCanStillFreeExplicitly)
{
  detail::host_runtime rt{simulated()};
  CachingDeviceAllocator a{8, 3, 7, 6'291'455, true, false, rt};
  void* p{};
  ASSERT_EQ(a.DeviceAllocate(&p, 100), cudaSuccess);
  ASSERT_EQ(a.DeviceFree(p), cudaSuccess);
  EXPECT_EQ(a.FreeAllCached(), cudaSuccess);
  EXPECT_EQ(rt.live_allocations(), 0U);
}

TEST_F(caching_test, LargerBinBlocksAreNeverGivenToSmallerRequests)
{
  void* big = alloc(20000);  // bin 5 (32 KiB)
  EXPECT_EQ(a_.DeviceFree(big), cudaSuccess);
  void* small = alloc(1000);  // bin 4: the cached 32 KiB block is not considered
  EXPECT_NE(small, big);
  EXPECT_EQ(a_.cached_bytes[0].free, 32768U);
  EXPECT_EQ(a_.cached_bytes[0].live, 4096U);
  void* tiny = alloc(1);  // bin 3: neither
  EXPECT_NE(tiny, big);
  EXPECT_NE(tiny, small);
  EXPECT_EQ(rt_.live_allocations(), 3U);
  void* same = alloc(4097);  // bin 5 again: the cached block
  EXPECT_EQ(same, big);
  EXPECT_EQ(a_.cached_bytes[0].free, 0U);
  // and a smaller block is never used for a larger request
  EXPECT_EQ(a_.DeviceFree(tiny), cudaSuccess);
  void* other = alloc(513);
  EXPECT_NE(other, tiny);
  EXPECT_EQ(a_.cached_bytes[0].free, 512U);
  for (void* x : {small, same, other}) { EXPECT_EQ(a_.DeviceFree(x), cudaSuccess); }
}

TEST(caching_limits, MaxCachedBytesIsInclusiveAndPerDevice)
{
  detail::host_runtime rt{simulated(std::size_t{1} << 30, 2)};
  CachingDeviceAllocator a{8, 3, 7, 8192, false, false, rt};
  void* p[6]{};
  for (int i = 0; i < 3; ++i) { ASSERT_EQ(a.DeviceAllocate(0, &p[i], 4096), cudaSuccess); }
  for (int i = 3; i < 6; ++i) { ASSERT_EQ(a.DeviceAllocate(1, &p[i], 4096), cudaSuccess); }
  for (int i = 0; i < 3; ++i) { ASSERT_EQ(a.DeviceFree(0, p[i]), cudaSuccess); }
  EXPECT_EQ(a.cached_bytes[0].free, 8192U);  // exactly the limit: still cached
  EXPECT_EQ(rt.live_allocations(), 5U);      // the third would exceed it: freed
  for (int i = 3; i < 6; ++i) { ASSERT_EQ(a.DeviceFree(1, p[i]), cudaSuccess); }
  EXPECT_EQ(a.cached_bytes[1].free, 8192U);  // device 1 has its own 8192
  EXPECT_EQ(rt.live_allocations(), 4U);
  void* q{};
  ASSERT_EQ(a.DeviceAllocate(0, &q, 100), cudaSuccess);
  ASSERT_EQ(a.DeviceFree(0, q), cudaSuccess);  // 512 more would exceed device 0's limit
  EXPECT_EQ(a.cached_bytes[0].free, 8192U);
  EXPECT_EQ(rt.live_allocations(), 4U);
  a.check_invariants();
}

TEST(caching_limits, UnlimitedByDefaultForTheExplicitConstructor)
{
  detail::host_runtime rt{simulated()};
  CachingDeviceAllocator a{
      2,     1, CachingDeviceAllocator::INVALID_BIN, CachingDeviceAllocator::INVALID_SIZE, false,
      false, rt};
  EXPECT_EQ(a.max_cached_bytes, CachingDeviceAllocator::INVALID_SIZE);
  std::vector<void*> p(8);
  for (auto& x : p) { ASSERT_EQ(a.DeviceAllocate(&x, 16 * MiB), cudaSuccess); }
  for (auto* x : p) { ASSERT_EQ(a.DeviceFree(x), cudaSuccess); }
  EXPECT_EQ(a.cached_bytes[0].free, 128 * MiB);  // everything cached: no limit, no largest bin
  EXPECT_EQ(rt.live_allocations(), 8U);
}

TEST(caching_debug, DefaultsToStdoutAndReportsFreesUnknownPointersAndCleanup)
{
  detail::host_runtime rt{simulated()};
  ::testing::internal::CaptureStdout();
  {
    CachingDeviceAllocator a{8, 3, 7, 512, false, true, rt};
    void *p{}, *q{}, *big{};
    ASSERT_EQ(a.DeviceAllocate(&p, 100), cudaSuccess);
    ASSERT_EQ(a.DeviceAllocate(&q, 100), cudaSuccess);
    ASSERT_EQ(a.DeviceAllocate(&big, 3 * MiB), cudaSuccess);
    ASSERT_EQ(a.DeviceFree(p), cudaSuccess);    // cached
    ASSERT_EQ(a.DeviceFree(q), cudaSuccess);    // over the limit: freed
    ASSERT_EQ(a.DeviceFree(big), cudaSuccess);  // pass-through: freed
    int local{};
    EXPECT_EQ(a.DeviceFree(&local), cudaErrorInvalidValue);
  }  // the destructor frees the cached block
  auto const text = ::testing::internal::GetCapturedStdout();
  for (char const* needle : {"allocated new block", "returned block to the cache", "freed block",
                             "unknown pointer", "freeing 1 cached"}) {
    EXPECT_NE(text.find(needle), std::string::npos) << needle << " missing in\n" << text;
  }
  EXPECT_EQ(rt.live_allocations(), 0U);
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

// A resource destroyed with blocks still allocated gave none of them back (10 runtime
// allocations were left); now it frees them and the cache to upstream and says so on stderr.
TEST(caching_memory_resource_test, DestroyedWithLiveBlocksFreesThemAndReports)
{
  detail::host_runtime rt{simulated()};
  mr::cuda_memory_resource up{rt};
  ::testing::internal::CaptureStderr();
  {
    mr::caching_memory_resource mr{&up, {}, rt};
    for (int i = 0; i < 10; ++i) { (void)mr.allocate(1000 + 100000 * i); }  // binned and through
    void* cached = mr.allocate(512);
    mr.deallocate(cached, 512);
    EXPECT_EQ(rt.live_allocations(), 11U);
  }
  auto const text = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rt.live_allocations(), 0U);
  EXPECT_NE(text.find("destroyed with 10 blocks ("), std::string::npos) << text;
  EXPECT_NE(text.find("still allocated; freed to the upstream"), std::string::npos) << text;
}

TEST(caching_memory_resource_test, DestroyedEmptySaysNothing)
{
  detail::host_runtime rt{simulated()};
  mr::cuda_memory_resource up{rt};
  ::testing::internal::CaptureStderr();
  {
    mr::caching_memory_resource mr{&up, {}, rt};
    mr.deallocate(mr.allocate(1000), 1000);
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(rt.live_allocations(), 0U);
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
