// The host stand-in: memory accounting, simulated addresses, and the stream/event model.
#include <gpumem/align.hpp>
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/error.hpp>

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace gpumem::detail {
namespace {

TEST(host_runtime, capacity_is_enforced_and_accounted)
{
  host_runtime rt{{.capacity_bytes = 1 << 20}};
  void* a = rt.allocate(memory_kind::device, 1000);
  EXPECT_EQ(rt.used_bytes(), 1024u);  // footprint rounds to 256
  EXPECT_TRUE(is_pointer_aligned(a));
  EXPECT_THROW((void)rt.allocate(memory_kind::device, 1 << 20), out_of_memory);
  EXPECT_THROW((void)rt.allocate(memory_kind::device, SIZE_MAX), out_of_memory);
  EXPECT_EQ(rt.memory_info().free_bytes, (1u << 20) - 1024u);
  rt.free(memory_kind::device, a);
  EXPECT_EQ(rt.used_bytes(), 0u);
  EXPECT_EQ(rt.peak_used_bytes(), 1024u);
  rt.check_invariants();
}

TEST(host_runtime, failure_injection_fails_then_recovers)
{
  host_runtime rt;
  rt.fail_next_allocations(2);
  EXPECT_THROW((void)rt.allocate(memory_kind::device, 256), out_of_memory);
  EXPECT_THROW((void)rt.allocate(memory_kind::managed, 256), out_of_memory);
  void* p = rt.allocate(memory_kind::device, 256);
  rt.free(memory_kind::device, p);
  EXPECT_EQ(rt.calls().allocate, 3u);
}

TEST(host_runtime, simulated_space_reuses_and_coalesces_without_touching_memory)
{
  host_runtime rt{{.capacity_bytes = 4 << 20, .backed = false}};
  void* a = rt.allocate(memory_kind::device, 1 << 20);
  void* b = rt.allocate(memory_kind::device, 1 << 20);
  void* c = rt.allocate(memory_kind::device, 2 << 20);
  EXPECT_THROW((void)rt.allocate(memory_kind::device, 256), out_of_memory);
  rt.free(memory_kind::device, a);
  rt.free(memory_kind::device, b);
  void* d = rt.allocate(memory_kind::device, 2 << 20);  // needs a and b coalesced
  EXPECT_EQ(d, a);
  rt.free(memory_kind::device, c);
  rt.free(memory_kind::device, d);
  EXPECT_EQ(rt.allocate(memory_kind::device, 4 << 20), a);  // whole space is one range again
}

TEST(host_runtime, events_are_ready_when_their_stream_completes_past_them)
{
  host_runtime rt;
  auto s = rt.create_stream();
  auto e = rt.event_create();
  EXPECT_TRUE(rt.event_query(e));  // never recorded
  rt.enqueue(s, 2);
  rt.event_record(e, s);
  EXPECT_FALSE(rt.event_query(e));
  rt.complete(s);
  EXPECT_TRUE(rt.event_query(e));
  rt.enqueue(s);
  EXPECT_TRUE(rt.event_query(e));  // later work does not matter
  rt.event_destroy(e);
}

TEST(host_runtime, a_wait_holds_later_work_until_the_event_is_ready)
{
  host_runtime rt;
  auto a = rt.create_stream();
  auto b = rt.create_stream();
  auto e = rt.event_create();
  rt.enqueue(a);
  rt.event_record(e, a);
  rt.enqueue(b);  // before the wait: independent of a
  rt.stream_wait_event(b, e);
  rt.enqueue(b);  // after the wait
  rt.complete(b);
  EXPECT_EQ(rt.completed(b), 1u);  // stops at the wait
  rt.complete(a);
  rt.complete(b);
  EXPECT_EQ(rt.completed(b), 2u);
  rt.event_destroy(e);
}

// As in CUDA, a wait is work of its stream: an event recorded after it completes only once the
// wait is satisfied, and a stream that waits on that event waits for the first stream too (the
// virtual-memory pool orders a side stream after the compute stream's wait on another stream).
TEST(host_runtime, an_event_recorded_after_a_wait_covers_what_was_waited_for)
{
  host_runtime rt;
  auto a = rt.create_stream();
  auto b = rt.create_stream();
  auto c = rt.create_stream();
  auto e = rt.event_create();
  auto f = rt.event_create();
  rt.enqueue(a);
  rt.event_record(e, a);
  rt.stream_wait_event(b, e);  // nothing enqueued on b after the wait yet
  rt.event_record(f, b);
  EXPECT_FALSE(rt.event_query(f)) << "f is recorded after b's wait for a";
  rt.stream_wait_event(c, f);
  rt.enqueue(c);
  rt.complete(b);
  rt.complete(c);
  EXPECT_EQ(rt.completed(c), 0u) << "c runs before a's work is done";
  rt.complete(a);
  EXPECT_TRUE(rt.event_query(f));
  rt.complete(c);
  EXPECT_EQ(rt.completed(c), 1u);
  rt.enqueue(a);
  rt.event_record(e, a);
  rt.stream_wait_event(b, e);
  rt.event_record(f, b);
  rt.event_synchronize(f);  // the host waits for a's work too
  EXPECT_EQ(rt.completed(a), 2u);
  rt.event_destroy(e);
  rt.event_destroy(f);
}

TEST(host_runtime, synchronizing_completes_the_work_waited_for_and_its_dependencies)
{
  host_runtime rt;
  auto a = rt.create_stream();
  auto b = rt.create_stream();
  auto e = rt.event_create();
  rt.enqueue(a, 3);
  rt.event_record(e, a);
  rt.stream_wait_event(b, e);
  rt.enqueue(b);
  rt.stream_synchronize(b);
  EXPECT_EQ(rt.completed(a), 3u);
  EXPECT_EQ(rt.completed(b), 1u);
  rt.enqueue(a);
  auto f = rt.event_create();
  rt.event_record(f, a);
  rt.event_synchronize(f);
  EXPECT_TRUE(rt.event_query(f));
  rt.event_destroy(e);
  rt.event_destroy(f);
}

TEST(host_runtime, free_synchronizes_the_device_like_cudaFree)
{
  host_runtime rt;
  auto a = rt.create_stream();
  rt.enqueue(a);
  void* p = rt.allocate(memory_kind::device, 256);
  rt.free(memory_kind::device, p);
  EXPECT_EQ(rt.completed(a), rt.enqueued(a));
}

// A device-wide synchronization (cudaFree here) completes the streams with pending work only:
// with 20,000 idle streams it visits none, so its cost (and the simulated ns/op of a replay with
// tens of thousands of streams) does not grow with the number of streams.
TEST(host_runtime, device_synchronization_visits_only_streams_with_pending_work)
{
  host_runtime rt{{.backed = false}};
  std::vector<cudaStream_t> streams;
  for (int i = 0; i < 20000; ++i) { streams.push_back(rt.create_stream()); }
  void* p = rt.allocate(memory_kind::device, 256);
  rt.free(memory_kind::device, p);
  EXPECT_EQ(rt.calls().synchronize_visits, 0u);
  auto e = rt.event_create();
  rt.enqueue(streams[7], 2);
  rt.event_record(e, streams[7]);
  rt.stream_wait_event(streams[9], e);
  rt.enqueue(streams[9]);
  rt.enqueue(streams[19999]);
  p = rt.allocate(memory_kind::device, 256);
  rt.free(memory_kind::device, p);
  EXPECT_EQ(rt.calls().synchronize_visits, 3u);
  for (auto s : {streams[7], streams[9], streams[19999]}) {
    EXPECT_EQ(rt.completed(s), rt.enqueued(s));
  }
  rt.device_synchronize();  // nothing pending: no stream visited
  rt.complete_all();
  EXPECT_EQ(rt.calls().synchronize_visits, 3u);
  rt.enqueue(streams[3]);
  rt.complete_all();
  EXPECT_EQ(rt.completed(streams[3]), 1u);
  EXPECT_EQ(rt.calls().synchronize_visits, 4u);
  rt.event_destroy(e);
  rt.check_invariants();
}

TEST(host_runtime, auto_complete_never_leaves_work_for_a_synchronization)
{
  host_runtime rt{{.backed = false, .auto_complete = true}};
  std::vector<cudaStream_t> streams;
  for (int i = 0; i < 1000; ++i) { streams.push_back(rt.create_stream()); }
  for (auto s : streams) { rt.enqueue(s, 3); }
  for (int i = 0; i < 100; ++i) {
    void* p = rt.allocate(memory_kind::device, 4096);
    rt.free(memory_kind::device, p);
  }
  rt.device_synchronize();
  EXPECT_EQ(rt.calls().synchronize_visits, 0u);
}

TEST(host_runtime, per_thread_default_streams_are_distinct_per_thread)
{
  host_runtime rt;
  rt.enqueue(cudaStreamPerThread, 5);
  std::uint64_t other = 99;
  std::thread t{[&] { other = rt.enqueued(cudaStreamPerThread); }};
  t.join();
  EXPECT_EQ(other, 0u);
  EXPECT_EQ(rt.enqueued(cudaStreamPerThread), 5u);
  EXPECT_EQ(rt.enqueued(nullptr), rt.enqueued(cudaStreamLegacy));
}

TEST(host_runtime, auto_complete_finishes_work_immediately)
{
  host_runtime rt{{.auto_complete = true}};
  auto s = rt.create_stream();
  auto e = rt.event_create();
  rt.enqueue(s, 10);
  rt.event_record(e, s);
  EXPECT_TRUE(rt.event_query(e));
  rt.event_destroy(e);
}

TEST(host_runtime, unknown_handles_are_rejected)
{
  host_runtime rt;
  int not_a_stream = 0;
  EXPECT_THROW(rt.enqueue(reinterpret_cast<cudaStream_t>(&not_a_stream)), logic_error);
  EXPECT_THROW((void)rt.event_query(reinterpret_cast<cudaEvent_t>(&not_a_stream)), logic_error);
  EXPECT_THROW(rt.set_device(5), logic_error);
  EXPECT_THROW(host_runtime({.granularity_bytes = 3}), logic_error);
}

}  // namespace
}  // namespace gpumem::detail
