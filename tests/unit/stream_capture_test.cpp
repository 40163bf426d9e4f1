// Stream capture over the host stand-in: the calls CUDA forbids during a global-mode capture are
// refused as CUDA refuses them (and break the capture), and our suballocators that need such a
// call fail with a message that says what to do, then work again once the capture ends.
#include "suballocator_test_helpers.hpp"

#include <gpumem/detail/stream_capture.hpp>
#include <gpumem/caching_device_allocator.hpp>
#include <gpumem/mr/caching_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>

#include <algorithm>
#include <string>

namespace gpumem::test {
namespace {

using pool_mr = mr::pool_memory_resource<mr::cuda_memory_resource>;

/// Runs `f`, expecting cuda_error `code` whose message names the CUDA graph capture.
template <class F>
void expect_capture_refusal(F&& f, cudaError_t code)
{
  try {
    f();
    ADD_FAILURE() << "no error during the capture";
  } catch (cuda_error const& e) {
    EXPECT_EQ(e.status(), code);
    std::string const what = e.what();
    EXPECT_NE(what.find("captured into a CUDA graph"), std::string::npos) << what;
    EXPECT_NE(what.find("cuda_async_memory_resource"), std::string::npos) << what;
  }
}

struct capture_test : ::testing::Test {
  host_upstream up;
  cudaStream_t a = up.rt.create_stream();
  cudaStream_t b = up.rt.create_stream();
};

TEST_F(capture_test, ForbiddenCallsAreRefusedAndBreakTheCapture)
{
  auto ev = up.rt.event_create();
  up.rt.begin_global_capture(b);
  up.rt.event_record(ev, a);  // recording on another, ordinary stream is allowed
  up.rt.stream_wait_event(a, ev);
  EXPECT_TRUE(up.rt.end_capture(b)) << "allowed calls must not break the capture";

  up.rt.begin_global_capture(b);
  expect_capture_refusal([&] { (void)up.rt.event_query(ev); }, cudaErrorStreamCaptureUnsupported);
  expect_capture_refusal([&] { up.rt.event_synchronize(ev); }, cudaErrorStreamCaptureUnsupported);
  expect_capture_refusal([&] { up.rt.stream_synchronize(a); }, cudaErrorStreamCaptureUnsupported);
  expect_capture_refusal([&] { up.rt.device_synchronize(); }, cudaErrorStreamCaptureUnsupported);
  expect_capture_refusal([&] { (void)up.rt.allocate(detail::memory_kind::device, 256); },
                         cudaErrorStreamCaptureUnsupported);
  expect_capture_refusal([&] { up.rt.event_record(ev, nullptr); }, cudaErrorStreamCaptureImplicit);
  expect_capture_refusal([&] { up.rt.stream_wait_event(nullptr, ev); },
                         cudaErrorStreamCaptureImplicit);
  EXPECT_FALSE(up.rt.end_capture(b)) << "a refused call invalidates the capture";
  EXPECT_NO_THROW(up.rt.device_synchronize());
  up.rt.event_destroy(ev);
}

// What a caller asks before an event record or wait that a capture would refuse.
TEST_F(capture_test, StreamCapturingTellsTheCapturedStreamAndTheLegacyStream)
{
  EXPECT_FALSE(up.rt.stream_capturing(a));
  EXPECT_FALSE(up.rt.stream_capturing(nullptr));
  up.rt.begin_global_capture(b);
  EXPECT_TRUE(up.rt.stream_capturing(b));
  EXPECT_FALSE(up.rt.stream_capturing(a));
  EXPECT_TRUE(up.rt.stream_capturing(nullptr)) << "the legacy stream is forbidden meanwhile";
  EXPECT_TRUE(up.rt.end_capture(b)) << "asking does not break the capture";
  EXPECT_FALSE(up.rt.stream_capturing(b));
}

TEST_F(capture_test, CaptureMisuseIsALogicError)
{
  EXPECT_THROW((void)up.rt.end_capture(a), gpumem::logic_error);
  up.rt.begin_global_capture(a);
  EXPECT_THROW(up.rt.begin_global_capture(b), gpumem::logic_error);
  EXPECT_THROW((void)up.rt.end_capture(b), gpumem::logic_error);
  EXPECT_TRUE(up.rt.end_capture(a));
}

TEST_F(capture_test, CaptureErrorsAreRecognised)
{
  EXPECT_TRUE(detail::is_stream_capture_error(cudaErrorStreamCaptureUnsupported));
  EXPECT_TRUE(detail::is_stream_capture_error(cudaErrorStreamCaptureImplicit));
  EXPECT_TRUE(detail::is_stream_capture_error(cudaErrorCapturedEvent));
  EXPECT_FALSE(detail::is_stream_capture_error(cudaErrorMemoryAllocation));
  EXPECT_FALSE(detail::is_stream_capture_error(cudaSuccess));
}

TEST_F(capture_test, PoolThatMustGrowDuringACaptureFailsClearlyAndStaysUsable)
{
  pool_mr pool{&up.cuda, MiB, std::nullopt, up.rt};
  void* small = pool.allocate(KiB, a);  // fits the first chunk: no CUDA call
  up.rt.begin_global_capture(b);
  void* more = pool.allocate(KiB, a);  // still no CUDA call: allowed
  expect_capture_refusal([&] { (void)pool.allocate(4 * MiB, a); },
                         cudaErrorStreamCaptureUnsupported);
  EXPECT_FALSE(up.rt.end_capture(b));
  pool.check_invariants();
  EXPECT_EQ(pool.pool_size(), MiB) << "the failed growth left nothing behind";
  void* big = pool.allocate(4 * MiB, a);  // after the capture the same request works
  pool.check_invariants();
  pool.deallocate(big, 4 * MiB, a);
  pool.deallocate(more, KiB, a);
  pool.deallocate(small, KiB, a);
  pool.check_invariants();
}

TEST_F(capture_test, PoolThatMustReclaimDuringACaptureKeepsItsBlocksWithTheirStreams)
{
  // The pool cannot grow, and the two halves of its chunk are free on two other streams: only a
  // synchronization (to merge them) can serve a whole-chunk request on b.
  pool_mr pool{&up.cuda, MiB, MiB, up.rt};
  cudaStream_t c = up.rt.create_stream();
  void* lo       = pool.allocate(MiB / 2, a);
  void* hi       = pool.allocate(MiB / 2, c);
  up.rt.enqueue(a);  // work that still uses them
  up.rt.enqueue(c);
  pool.deallocate(lo, MiB / 2, a);
  pool.deallocate(hi, MiB / 2, c);
  up.rt.begin_global_capture(b);
  expect_capture_refusal([&] { (void)pool.allocate(MiB, b); }, cudaErrorStreamCaptureUnsupported);
  EXPECT_FALSE(up.rt.end_capture(b));
  pool.check_invariants();
  // The blocks stayed with their streams: a third stream gets one only by waiting for its stream
  // (an event), not as memory free for anyone.
  cudaStream_t d    = up.rt.create_stream();
  auto const before = up.rt.calls().stream_wait_event;
  void* got         = pool.allocate(MiB / 2, d);
  EXPECT_TRUE(got == lo || got == hi);
  EXPECT_EQ(up.rt.calls().stream_wait_event, before + 1) << "reused without waiting for its stream";
  pool.deallocate(got, MiB / 2, d);
  up.rt.complete_all();
  void* whole = pool.allocate(MiB, b);  // after the capture: synchronize, merge, serve
  EXPECT_EQ(whole, std::min(lo, hi));
  pool.deallocate(whole, MiB, b);
  pool.check_invariants();
}

// -- the caching allocators ---------------------------------------------------------------------

TEST_F(capture_test, CachingResourceThatMustAllocateDuringACaptureFailsClearlyAndStaysUsable)
{
  mr::caching_memory_resource caching{&up.cuda, {}, up.rt};
  void* cached = caching.allocate(4 * KiB, a);
  caching.deallocate(cached, 4 * KiB, a);  // cached on a
  up.rt.begin_global_capture(b);
  void* again = caching.allocate(4 * KiB, a);  // the same stream reuses at once: no CUDA call
  EXPECT_EQ(again, cached);
  expect_capture_refusal([&] { (void)caching.allocate(256 * KiB, a); },
                         cudaErrorStreamCaptureUnsupported);  // a new block needs cudaMalloc
  EXPECT_FALSE(up.rt.end_capture(b));
  void* fresh = caching.allocate(256 * KiB, a);  // after the capture the same request works
  caching.deallocate(fresh, 256 * KiB, a);
  caching.deallocate(again, 4 * KiB, a);
  EXPECT_EQ(caching.bad_deallocations(), 0U);
}

TEST_F(capture_test, CachingResourceThatMustQueryAnotherStreamDuringACaptureFailsClearly)
{
  mr::caching_memory_resource caching{&up.cuda, {}, up.rt};
  void* p = caching.allocate(4 * KiB, a);
  up.rt.enqueue(a);  // work that still uses it
  caching.deallocate(p, 4 * KiB, a);
  up.rt.begin_global_capture(b);
  // Reuse on b needs to know whether a's work is done (an event query), which the capture forbids.
  expect_capture_refusal([&] { (void)caching.allocate(4 * KiB, b); },
                         cudaErrorStreamCaptureUnsupported);
  EXPECT_FALSE(up.rt.end_capture(b));
  up.rt.complete_all();
  void* q = caching.allocate(4 * KiB, b);  // after the capture: the block, now free for anyone
  EXPECT_EQ(q, p);
  caching.deallocate(q, 4 * KiB, b);
}

TEST_F(capture_test, CachingDeviceAllocatorReturnsTheCaptureErrorAndStaysUsable)
{
  caching_device_allocator alloc{false, false, up.rt};
  up.rt.begin_global_capture(b);
  void* p{};
  EXPECT_EQ(alloc.DeviceAllocate(&p, 4 * KiB, a), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(p, nullptr);
  EXPECT_FALSE(up.rt.end_capture(b));
  ASSERT_EQ(alloc.DeviceAllocate(&p, 4 * KiB, a), cudaSuccess);
  EXPECT_EQ(alloc.DeviceFree(p), cudaSuccess);
}

}  // namespace
}  // namespace gpumem::test
