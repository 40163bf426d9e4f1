// The replayer: golden numbers on hand-made traces (computed by hand below), anomalies counted
// not fatal, out-of-memory at the event with the stack's state, --threads keeping the order.
#include "../../src/replay/memory_layout.hpp"

#include <gpumem/align.hpp>
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/spec/resource_factory.hpp>
#include <gpumem/replay/replay.hpp>
#include <support/memory_state_checks.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace gpumem::trace {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

struct temp_trace {
  std::string path;
  explicit temp_trace(std::string const& body)
      : path{(std::filesystem::temp_directory_path() /
              ("replay." + std::to_string(::getpid()) + "." + std::to_string(counter++) + ".csv"))
                 .string()}
  {
    std::ofstream{path} << "Thread,Time,Action,Pointer,Size,Stream\n" << body;
  }
  ~temp_trace() { std::remove(path.c_str()); }
  static inline int counter = 0;
};

struct simulated {
  detail::host_runtime rt;
  metered_runtime meter{rt};
  explicit simulated(std::size_t capacity = std::size_t{80} << 30)
      : rt{{.capacity_bytes = capacity, .backed = false, .auto_complete = true}}
  {
  }
  replay_result run(trace_profile const& p, std::string const& spec, replay_options o = {})
  {
    auto stack = spec::build(spec, meter, true);
    return replay(p, stack, meter, o);
  }
};

// A 1000 B, B 2048 B, C 3000 B; free B; D 4000 B. Peak live = 1000 + 3000 + 4000 = 8000 at D.
// In a 1 MiB pool (blocks rounded to 256 B, best fit): A | hole of B (2048) | C | D | tail.
//   internal = (1024-1000) + (3072-3000) + (4096-4000) = 24 + 72 + 96 = 192
//   free     = 1048576 - 8000 - 192 = 1040384
//   largest  = 1048576 - (1024 + 2048 + 3072 + 4096) = 1038336 (the tail; B's hole is 2048)
//   external = 1 - 1038336 / 1040384;  held / live = 1048576 / 8000 = 131.072
std::string const golden_body =
    "0,1,allocate,0x1000,1000,0\n"
    "0,2,allocate,0x2000,2048,0\n"
    "0,3,allocate,0x3000,3000,0\n"
    "0,4,free,0x2000,2048,0\n"
    "0,5,allocate,0x4000,4000,0\n"
    "0,6,free,0x1000,1000,0\n"
    "0,7,free,0x3000,3000,0\n"
    "0,8,free,0x4000,4000,0\n";

TEST(Replay, ProfileOfTheGoldenTrace)
{
  temp_trace t{golden_body};
  auto p = profile_trace(t.path);
  EXPECT_EQ(p.events, 8U);
  EXPECT_EQ(p.allocations, 4U);
  EXPECT_EQ(p.frees, 4U);
  EXPECT_EQ(p.peak_live_bytes, 8000U);
  EXPECT_EQ(p.peak_live_event, 4U);
  EXPECT_EQ(p.peak_live_blocks, 3U);
  EXPECT_EQ(p.slots, 3U);  // B's slot is reused by D
  EXPECT_EQ(p.unknown_frees + p.double_allocates + p.size_mismatches + p.left_live, 0U);
}

/// The hand-computed numbers of the golden trace over a 1 MiB pool (see golden_body).
void expect_golden_pool(replay_result const& r, trace_profile const& p, char const* how)
{
  SCOPED_TRACE(how);
  ASSERT_FALSE(r.failure);
  EXPECT_EQ(p.peak_live_event, 4U);
  EXPECT_EQ(r.peak_held_bytes, MiB);
  EXPECT_DOUBLE_EQ(r.footprint_ratio(p), 131.072);
  auto const& s = r.at_peak;
  EXPECT_TRUE(s.layout_known);
  EXPECT_EQ(s.held_bytes, MiB);
  EXPECT_EQ(s.live_bytes, 8000U);
  EXPECT_EQ(s.live_blocks, 3U);
  EXPECT_EQ(s.internal_bytes, 192U);
  EXPECT_EQ(s.free_bytes, 1040384U);
  EXPECT_EQ(s.largest_free_bytes, 1038336U);
  EXPECT_DOUBLE_EQ(s.external_fragmentation(), 1.0 - 1038336.0 / 1040384.0);
  EXPECT_DOUBLE_EQ(s.internal_fragmentation(), 192.0 / 8192.0);  // of the memory the blocks got
  EXPECT_EQ(r.operations, 8U);
}

// Both ways: profile then replay, and replay while profiling (the peak found on the fly).
TEST(Replay, GoldenPoolNumbers)
{
  temp_trace t{golden_body};
  simulated sim;
  auto p = profile_trace(t.path);
  expect_golden_pool(sim.run(p, "pool:initial=1MiB"), p, "two passes");
  EXPECT_EQ(sim.meter.held_bytes(), 0U);  // the stack (and its pool) is gone after the run
  {
    auto stack = spec::build("pool:initial=1MiB", sim.meter, true);
    auto run   = profile_and_replay(t.path, stack, sim.meter);
    expect_golden_pool(run.result, run.profile, "one pass");
  }
  EXPECT_EQ(sim.meter.held_bytes(), 0U);
}

TEST(Replay, GoldenLeafNumbersAndTimeline)
{
  temp_trace t{golden_body};
  auto p = profile_trace(t.path);
  simulated sim;
  replay_options o;
  o.timeline_points = 4;  // 8 events: buckets of 2
  auto r            = sim.run(p, "cuda", o);
  // cudaMalloc per block: held == live at every moment; no slack, no free space.
  EXPECT_EQ(r.peak_held_bytes, 8000U);
  EXPECT_DOUBLE_EQ(r.footprint_ratio(p), 1.0);
  EXPECT_EQ(r.at_peak.internal_bytes, 0U);
  EXPECT_EQ(r.at_peak.free_bytes, 0U);
  EXPECT_DOUBLE_EQ(r.at_peak.external_fragmentation(), 0.0);
  ASSERT_EQ(r.timeline.size(), 4U);
  // live after each event: 1000 3048 | 6048 4000 | 8000 5000 | 4000 0 -> bucket maxima
  EXPECT_EQ(r.timeline[0].live_bytes, 3048U);
  EXPECT_EQ(r.timeline[1].live_bytes, 6048U);
  EXPECT_EQ(r.timeline[2].live_bytes, 8000U);
  EXPECT_EQ(r.timeline[3].live_bytes, 4000U);
  EXPECT_EQ(r.timeline[3].event, 7U);
  EXPECT_EQ(r.timeline[2].held_bytes, 8000U);
  EXPECT_EQ(sim.meter.held_bytes(), 0U);
}

TEST(Replay, AnomaliesAreCountedNotFatal)
{
  temp_trace t{
      "0,1,allocate,0x10,512,0\n"
      "0,2,free,0x99,64,0\n"               // unknown pointer
      "0,3,allocate,0x10,1024,0\n"         // 0x10 is live: the stale 512 B block is freed first
      "0,4,free,0x10,2048,0\n"             // wrong size: freed with 1024
      "0,5,allocate failure,0x0,1234,0\n"  // skipped
      "0,6,free,0x10,1024,0\n"             // now unknown (already freed)
      "0,7,allocate,0x20,256,0\n"};        // never freed
  auto p = profile_trace(t.path);
  EXPECT_EQ(p.unknown_frees, 2U);
  EXPECT_EQ(p.double_allocates, 1U);
  EXPECT_EQ(p.size_mismatches, 1U);
  EXPECT_EQ(p.allocate_failures, 1U);
  EXPECT_EQ(p.left_live, 1U);
  EXPECT_EQ(p.peak_live_bytes, 1024U);
  simulated sim;
  auto r = sim.run(p, "pool:initial=1MiB");
  EXPECT_FALSE(r.failure);
  EXPECT_EQ(r.operations, 5U);            // 3 allocates, the stale free, one free
  EXPECT_EQ(sim.meter.held_bytes(), 0U);  // the pool was destroyed after its replay
  auto r2 = sim.run(p, "cuda");
  EXPECT_EQ(r2.peak_held_bytes, 1024U);
  EXPECT_EQ(sim.meter.held_bytes(), 0U);
}

TEST(Replay, OutOfMemoryStopsAtTheEventWithTheState)
{
  temp_trace t{
      "0,1,allocate,0x10,4096,0\n"
      "0,2,allocate,0x20,4096,0\n"
      "0,3,allocate,0x30,65536,0\n"
      "0,4,free,0x10,4096,0\n"};
  auto p = profile_trace(t.path);
  simulated sim{16384};
  auto r = sim.run(p, "cuda");
  ASSERT_TRUE(r.failure);
  EXPECT_EQ(r.failure->line, 4U);  // line 1 is the header
  EXPECT_EQ(r.failure->event, 2U);
  EXPECT_EQ(r.failure->bytes, 65536U);
  EXPECT_NE(r.failure->message.find("cuda_memory_resource"), std::string::npos)
      << r.failure->message;
  EXPECT_EQ(r.failure->state.live_bytes, 8192U);
  EXPECT_EQ(r.failure->state.held_bytes, 8192U);
  EXPECT_EQ(r.failure->state.live_blocks, 2U);
  EXPECT_EQ(sim.meter.held_bytes(), 0U);  // everything live was freed after the failure
}

TEST(Replay, ThreadsKeepTheTraceOrder)
{
  std::string body;
  for (int i = 0; i < 300; ++i) {
    int const thread = i % 3;
    body += std::to_string(thread) + "," + std::to_string(i) + ",allocate,0x" +
            std::to_string(1000 + i) + "," + std::to_string(256 * (1 + i % 5)) + "," +
            std::to_string(thread) + "\n";
    if (i % 2 == 1) {
      body += std::to_string((i + 1) % 3) + "," + std::to_string(i) + ",free,0x" +
              std::to_string(1000 + i - 1) + "," + std::to_string(256 * (1 + (i - 1) % 5)) + ",0\n";
    }
  }
  temp_trace t{body};
  auto p = profile_trace(t.path);
  EXPECT_EQ(p.threads.size(), 3U);
  EXPECT_EQ(p.streams.size(), 3U);
  simulated serial_sim, threaded_sim;
  replay_options o;
  o.chunk_events = 64;  // several chunks
  auto serial    = serial_sim.run(p, "pool:initial=1MiB", o);
  o.threads      = true;
  o.stream_of    = [&](std::uint64_t id) {
    return id == 0 ? cudaStream_t{} : threaded_sim.rt.create_stream();
  };
  auto threaded = threaded_sim.run(p, "pool:initial=1MiB", o);
  ASSERT_FALSE(threaded.failure);
  EXPECT_EQ(threaded.operations, serial.operations);
  EXPECT_EQ(threaded.at_peak.live_bytes, p.peak_live_bytes);
  EXPECT_EQ(threaded.timeline.size(), serial.timeline.size());
  for (std::size_t i = 0; i < serial.timeline.size(); ++i) {
    EXPECT_EQ(threaded.timeline[i].live_bytes, serial.timeline[i].live_bytes) << i;
  }
}

/// A random trace: sizes 1 B .. 4 MiB, at most `max_live` blocks, frees in random order, two
/// streams, a few anomalies (unknown frees, double allocates).
std::string random_body(std::uint64_t seed, int events, std::size_t max_live)
{
  std::mt19937_64 rng{seed};
  std::vector<std::pair<std::uint64_t, std::uint64_t>> live;
  std::string body;
  std::uint64_t next = 0x10000;
  for (int i = 0; i < events; ++i) {
    auto const stream = std::to_string(rng() % 2);
    if (rng() % 97 == 0) {
      body += "0," + std::to_string(i) + ",free,0x1," + std::to_string(8) + "," + stream + "\n";
    } else if (!live.empty() && rng() % 89 == 0) {
      auto const& [ptr, size] = live[rng() % live.size()];
      body += "0," + std::to_string(i) + ",allocate," + std::to_string(ptr) + "," +
              std::to_string(size) + "," + stream + "\n";
    } else if (live.empty() || (live.size() < max_live && rng() % 2 == 0)) {
      std::uint64_t const size = 1 + (rng() % 2 == 0 ? rng() % 4096 : rng() % (4 * MiB));
      live.emplace_back(next, size);
      body += "0," + std::to_string(i) + ",allocate," + std::to_string(next) + "," +
              std::to_string(size) + "," + stream + "\n";
      next += size + 4096;
    } else {
      auto const k = rng() % live.size();
      body += "0," + std::to_string(i) + ",free," + std::to_string(live[k].first) + "," +
              std::to_string(live[k].second) + "," + stream + "\n";
      live[k] = live.back();
      live.pop_back();
    }
  }
  return body;
}

using test::expect_same_state;

// One pass (replay while profiling, peak found on the fly) and two passes (profile, then replay
// knowing nothing more) give the same numbers, out-of-memory included; the peak state's live
// bytes are the profile's peak.
TEST(Replay, ProfileAndReplayMatchesTwoPasses)
{
  temp_trace t{random_body(7, 60000, 300)};
  auto const two_pass = profile_trace(t.path);
  EXPECT_GT(two_pass.double_allocates, 0U);
  EXPECT_GT(two_pass.unknown_frees, 0U);
  replay_options o;
  o.timeline_points = 50;
  o.stream_of       = [](std::uint64_t id) { return reinterpret_cast<cudaStream_t>(id); };
  int failures      = 0;
  for (std::string spec : {"pool", "arena", "cuda", "binning>pool", "fixed_size>pool",
                           "pool:initial=8MiB,max=32MiB"}) {
    simulated a, b;
    auto one = [&] {
      auto stack = spec::build(spec, a.meter, true);
      return profile_and_replay(t.path, stack, a.meter, o);
    }();
    auto two = b.run(two_pass, spec, o);
    auto& r  = one.result;
    EXPECT_EQ(one.profile.events, two_pass.events) << spec;
    EXPECT_EQ(one.profile.peak_live_bytes, two_pass.peak_live_bytes) << spec;
    EXPECT_EQ(one.profile.peak_live_event, two_pass.peak_live_event) << spec;
    EXPECT_EQ(one.profile.slots, two_pass.slots) << spec;
    EXPECT_EQ(one.profile.streams, two_pass.streams) << spec;
    EXPECT_EQ(r.peak_held_bytes, two.peak_held_bytes) << spec;
    EXPECT_EQ(r.peak_held_event, two.peak_held_event) << spec;
    EXPECT_EQ(r.operations, two.operations) << spec;
    expect_same_state(r.at_peak, two.at_peak, spec);
    // The layout history: the same offsets and chunks (each simulated device starts alike).
    EXPECT_EQ(one.profile.allocation_log.size(), two_pass.allocation_log.size()) << spec;
    EXPECT_EQ(one.profile.live_timeline, two_pass.live_timeline) << spec;
    ASSERT_EQ(r.layout.addresses.size(), two.layout.addresses.size()) << spec;
    for (std::size_t k = 0; k < r.layout.addresses.size(); ++k) {
      ASSERT_EQ(r.layout.addresses[k] - r.layout.base, two.layout.addresses[k] - two.layout.base)
          << spec << " " << k;
    }
    ASSERT_EQ(r.layout.chunks.size(), two.layout.chunks.size()) << spec;
    for (std::size_t i = 0; i < r.layout.chunks.size(); ++i) {
      EXPECT_EQ(r.layout.chunks[i].bytes, two.layout.chunks[i].bytes) << spec << " " << i;
      EXPECT_EQ(r.layout.chunks[i].from_event, two.layout.chunks[i].from_event) << spec << " " << i;
      EXPECT_EQ(r.layout.chunks[i].to_event, two.layout.chunks[i].to_event) << spec << " " << i;
    }
    ASSERT_EQ(r.failure.has_value(), two.failure.has_value()) << spec;
    if (r.failure) {
      ++failures;
      EXPECT_EQ(r.failure->event, two.failure->event) << spec;
      EXPECT_EQ(r.failure->line, two.failure->line) << spec;
      expect_same_state(r.failure->state, two.failure->state, spec);
    } else {
      EXPECT_EQ(r.at_peak.live_bytes, two_pass.peak_live_bytes) << spec;
      EXPECT_EQ(r.at_peak.live_blocks, two_pass.peak_live_blocks) << spec;
    }
    ASSERT_EQ(r.timeline.size(), two.timeline.size()) << spec;
    for (std::size_t i = 0; i < r.timeline.size(); ++i) {
      EXPECT_EQ(r.timeline[i].event, two.timeline[i].event) << spec << " " << i;
      EXPECT_EQ(r.timeline[i].live_bytes, two.timeline[i].live_bytes) << spec << " " << i;
      EXPECT_EQ(r.timeline[i].held_bytes, two.timeline[i].held_bytes) << spec << " " << i;
    }
    EXPECT_EQ(a.meter.held_bytes(), 0U) << spec;
  }
  EXPECT_EQ(failures, 2);  // the capped pool runs out; fixed_size meets a block over 1 MiB
}

// Spans double so that a trace of any length gives between N and 2N points, each the maximum of
// an equal span of events (the last one partial).
TEST(Replay, TimelineSpansDoubleWithTheTrace)
{
  temp_trace t{random_body(3, 1000, 50)};
  auto p = profile_trace(t.path);
  simulated sim;
  replay_options o;
  o.timeline_points = 10;
  auto r            = sim.run(p, "pool", o);
  ASSERT_GE(r.timeline.size(), 10U);
  ASSERT_LT(r.timeline.size(), 20U);
  auto const span = r.timeline[0].event + 1;
  for (std::size_t i = 0; i + 1 < r.timeline.size(); ++i) {
    EXPECT_EQ(r.timeline[i].event, (i + 1) * span - 1) << i;
  }
  EXPECT_EQ(r.timeline.back().event, 999U);
  std::size_t top = 0;
  for (auto const& pt : r.timeline) { top = std::max(top, pt.live_bytes); }
  EXPECT_EQ(top, p.peak_live_bytes);
}

// A malformed line far into the trace stops the one-pass replay with the line; the blocks replayed
// so far are given back and the stack stays usable.
TEST(Replay, OnePassStopsAtAMalformedLine)
{
  temp_trace t{random_body(5, 40000, 100) + "0,1,allocate,0xZZ,64,0\n"};
  simulated sim;
  {
    auto stack = spec::build("pool", sim.meter, true);
    try {
      (void)profile_and_replay(t.path, stack, sim.meter);
      ADD_FAILURE() << "no trace_error";
    } catch (trace_error const& e) {
      EXPECT_EQ(e.line(), 40002U);
      EXPECT_NE(std::string{e.what()}.find("hex digits"), std::string::npos) << e.what();
    }
    void* p = stack.top().allocate(4096, cuda_stream_view{});
    stack.top().deallocate(p, 4096, cuda_stream_view{});
  }
  EXPECT_EQ(sim.meter.held_bytes(), 0U);
}

// Tens of thousands of distinct streams and threads: each id keeps the index of its first
// appearance (ids are looked up in a hash map, not by a scan of those seen so far), and a trace
// with more than 65535 distinct streams is refused with the limit in the message.
TEST(Replay, ManyDistinctStreamsAndThreadsKeepTheirIndexes)
{
  std::string body;
  constexpr std::uint64_t n = 40000;
  for (std::uint64_t i = 0; i < n; ++i) {
    auto const id = 1000 + i * 7919 % n;  // a permutation: every id once, out of order
    body += "" + std::to_string(id) + "," + std::to_string(2 * i) + ",allocate,0x" +
            std::to_string(i + 1) + "000,256," + std::to_string(id) + "\n";
    body += "" + std::to_string(id) + "," + std::to_string(2 * i + 1) + ",free,0x" +
            std::to_string(i + 1) + "000,256," + std::to_string(id) + "\n";
  }
  temp_trace t{body};
  auto const p = profile_trace(t.path);
  ASSERT_EQ(p.streams.size(), n);
  ASSERT_EQ(p.threads.size(), n);
  for (std::uint64_t i = 0; i < n; ++i) {
    ASSERT_EQ(p.streams[i], 1000 + i * 7919 % n) << i;
    ASSERT_EQ(p.threads[i], p.streams[i]) << i;
  }
  EXPECT_EQ(p.frees, n);
  EXPECT_EQ(p.unknown_frees, 0U);

  std::string too_many;
  for (std::uint64_t i = 0; i <= 65535; ++i) {
    too_many += "0," + std::to_string(i) + ",allocate,0x" + std::to_string(i + 1) + "000,256," +
                std::to_string(i + 1) + "\n";
  }
  temp_trace t2{too_many};
  std::string message;
  try {
    (void)profile_trace(t2.path);
  } catch (trace_error const& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("at most 65535 distinct streams"), std::string::npos) << message;
}

// The trace alone: every allocate with its free, live over time (the trace's own, whatever the
// stack) and time since the first event, sampled at the same events as a replay's timeline.
TEST(Replay, ProfileKeepsAllocationsAndTimelines)
{
  temp_trace t{golden_body};
  auto p = profile_trace(t.path);
  ASSERT_EQ(p.allocation_log.size(), 4U);
  // A made at 0 freed at 5; B 1 -> 3; C 2 -> 6; D 4 -> 7 (events are 0-based rows)
  std::int64_t const want[4][3] = {{0, 5, 1000}, {1, 3, 2048}, {2, 6, 3000}, {4, 7, 4000}};
  for (std::size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(p.allocation_log[k].alloc_event, static_cast<std::uint64_t>(want[k][0])) << k;
    EXPECT_EQ(p.allocation_log[k].free_event, want[k][1]) << k;
    EXPECT_EQ(p.allocation_log[k].size, static_cast<std::uint64_t>(want[k][2])) << k;
    EXPECT_EQ(p.allocation_log[k].stack, -1) << k;
  }
  EXPECT_FALSE(p.allocations_omitted);
  ASSERT_EQ(p.live_timeline.size(), 8U);  // 8 events, 600 points asked: one per event
  EXPECT_EQ(p.live_timeline[4][0], 4U);
  EXPECT_EQ(p.live_timeline[4][1], 8000U);
  EXPECT_EQ(p.live_timeline[7][1], 0U);
  ASSERT_EQ(p.time_us.size(), 8U);  // Time 1..8: 0..7 since the first event
  EXPECT_EQ(p.time_us[7][0], 7U);
  EXPECT_EQ(p.time_us[7][1], 7U);
  simulated sim;
  auto r = sim.run(p, "pool:initial=1MiB");
  ASSERT_EQ(r.timeline.size(), p.live_timeline.size());
  for (std::size_t i = 0; i < r.timeline.size(); ++i) {
    EXPECT_EQ(r.timeline[i].event, p.live_timeline[i][0]) << i;
    EXPECT_EQ(r.timeline[i].live_bytes, p.live_timeline[i][1]) << i;
  }
}

TEST(Replay, UntimedTraceHasNoTimeButALiveTimeline)
{
  temp_trace t{"0,0,allocate,0x10,512,0\n0,0,free,0x10,512,0\n0,0,allocate,0x20,64,0\n"};
  auto p = profile_trace(t.path);
  EXPECT_TRUE(p.time_us.empty());
  ASSERT_EQ(p.live_timeline.size(), 3U);
  EXPECT_EQ(p.allocation_log[1].free_event, -1);  // never freed
}

// Where the golden trace's blocks go. cuda: one cudaMalloc per block, laid out 256-aligned one
// after the other by the simulated device: A 0, B 1024, C 3072 (B's hole is too small for D),
// D 6144; each block is its own chunk, held from its allocate to its free.
// pool:initial=1MiB: one 1 MiB chunk held throughout; blocks rounded to 256 B, carved from the
// top: A 1048576-1024, B A-2048, C B-3072, D C-4096 (best fit: B's 2048 B hole is too small).
TEST(Replay, GoldenLayoutHistory)
{
  temp_trace t{golden_body};
  auto p = profile_trace(t.path);
  simulated sim;
  auto cuda = sim.run(p, "cuda");
  ASSERT_TRUE(cuda.layout.known);
  ASSERT_EQ(cuda.layout.addresses.size(), 4U);
  std::uintptr_t const offsets[4] = {0, 1024, 3072, 6144};
  for (std::size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(cuda.layout.addresses[k] - cuda.layout.base, offsets[k]) << k;
  }
  ASSERT_EQ(cuda.layout.chunks.size(), 4U);
  std::int64_t const held[4][4] = {
      {0, 1000, 0, 5}, {1024, 2048, 1, 3}, {3072, 3000, 2, 6}, {6144, 4000, 4, 7}};
  for (std::size_t i = 0; i < 4; ++i) {
    auto const& c = cuda.layout.chunks[i];
    EXPECT_EQ(c.address - cuda.layout.base, static_cast<std::uintptr_t>(held[i][0])) << i;
    EXPECT_EQ(c.bytes, static_cast<std::size_t>(held[i][1])) << i;
    EXPECT_EQ(c.from_event, static_cast<std::uint64_t>(held[i][2])) << i;
    EXPECT_EQ(c.to_event, held[i][3]) << i;
  }
  EXPECT_EQ(cuda.peak_held_event, 4U);
  EXPECT_EQ(cuda.held_at_start, 0U);

  auto pool = sim.run(p, "pool:initial=1MiB");
  ASSERT_EQ(pool.layout.chunks.size(), 1U);
  EXPECT_EQ(pool.layout.chunks[0].address, pool.layout.base);
  EXPECT_EQ(pool.layout.chunks[0].bytes, MiB);
  EXPECT_EQ(pool.layout.chunks[0].from_event, 0U);
  EXPECT_EQ(pool.layout.chunks[0].to_event, -1);  // held until the stack is destroyed
  EXPECT_EQ(pool.held_at_start, MiB);
  std::uintptr_t const top[4] = {MiB - 1024, MiB - 3072, MiB - 6144, MiB - 10240};
  ASSERT_EQ(pool.layout.addresses.size(), 4U);
  for (std::size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(pool.layout.addresses[k] - pool.layout.base, top[k]) << k;
  }
}

/// Blocks not inside the chunks held when they were made (a block may span adjacent chunks, as
/// virtual-memory mappings).
std::size_t uncovered_blocks(trace_profile const& p, replay_result const& r)
{
  std::size_t bad = 0;
  for (std::size_t k = 0; k < r.layout.addresses.size(); ++k) {
    auto const& a = p.allocation_log[k];
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> held;
    for (auto const& c : r.layout.chunks) {
      bool const taken = c.from_event <= a.alloc_event;
      bool const kept  = c.to_event < 0 || static_cast<std::uint64_t>(c.to_event) >= a.alloc_event;
      if (taken && kept) { held.emplace_back(c.address, c.address + c.bytes); }
    }
    std::sort(held.begin(), held.end());
    auto at        = r.layout.addresses[k];
    auto const end = at + a.size;
    for (auto const& [from, to] : held) {
      if (from <= at && at < to) { at = to; }
    }
    bad += at < end ? 1 : 0;
  }
  return bad;
}

// The page's invariant: at the peak, the allocations live with an address are at_peak's blocks;
// and every block lies in chunks the stack held when it was made.
TEST(Replay, LiveAllocationsWithAddressesAtThePeakAreTheLiveBlocks)
{
  temp_trace t{random_body(11, 3000, 60)};
  auto p = profile_trace(t.path);
  simulated sim;
  for (char const* spec : {"pool", "cuda", "binning>pool", "arena", "vmm_pool", "caching"}) {
    auto r = sim.run(p, spec);
    ASSERT_FALSE(r.failure) << spec;
    ASSERT_TRUE(r.layout.known) << spec;
    ASSERT_EQ(r.layout.addresses.size(), p.allocation_log.size()) << spec;
    auto const at    = p.peak_live_event;
    std::size_t live = 0;
    for (std::size_t k = 0; k < p.allocation_log.size(); ++k) {
      auto const& a    = p.allocation_log[k];
      bool const alive = a.alloc_event <= at &&
                         (a.free_event < 0 || static_cast<std::uint64_t>(a.free_event) > at);
      if (alive && r.layout.addresses[k] != 0) { ++live; }
    }
    EXPECT_EQ(live, r.at_peak.live_blocks) << spec;
    EXPECT_EQ(live, p.peak_live_blocks) << spec;
    EXPECT_EQ(uncovered_blocks(p, r), 0U) << spec;
  }
}

/// The largest free range at the peak rebuilt from the arrays results.json carries (as the page
/// does): chunks held then (touching ones joined when chunks_join), blocks live then (rounded).
std::size_t largest_free_from_arrays(trace_profile const& p, replay_result const& r)
{
  auto const at = p.peak_live_event;
  std::vector<address_range> chunks, blocks;
  for (auto const& c : r.layout.chunks) {
    if (c.from_event <= at && (c.to_event < 0 || static_cast<std::uint64_t>(c.to_event) > at)) {
      chunks.emplace_back(c.address, c.bytes);
    }
  }
  std::sort(chunks.begin(), chunks.end());
  if (r.layout.chunks_join) { chunks = join_adjacent(chunks); }
  for (std::size_t k = 0; k < p.allocation_log.size(); ++k) {
    auto const& a = p.allocation_log[k];
    bool const alive =
        a.alloc_event <= at && (a.free_event < 0 || static_cast<std::uint64_t>(a.free_event) > at);
    if (alive && r.layout.addresses[k] != 0) {
      blocks.emplace_back(r.layout.addresses[k], align_up(a.size, CUDA_ALLOCATION_ALIGNMENT));
    }
  }
  std::sort(blocks.begin(), blocks.end());
  std::size_t largest = 0, b = 0;
  for (auto const& [start, bytes] : chunks) {
    auto cursor = start;
    for (; b < blocks.size() && blocks[b].first < start + bytes; ++b) {
      largest = std::max<std::size_t>(largest, blocks[b].first - std::min(cursor, blocks[b].first));
      cursor  = std::max(cursor, blocks[b].first + blocks[b].second);
    }
    largest = std::max<std::size_t>(largest, start + bytes - std::min(cursor, start + bytes));
  }
  return largest;
}

// The table's "largest free @ peak" is what the arrays say, whether the peak's layout was kept as
// a snapshot or settled during the replay, and mappings that touch count as one range.
TEST(Replay, LargestFreeAtThePeakAgreesWithTheArrays)
{
  temp_trace t{random_body(11, 3000, 60)};
  auto p = profile_trace(t.path);
  simulated sim;
  for (char const* spec : {"pool", "vmm_pool:handle=2MiB", "vmm_pool"}) {
    auto r = sim.run(p, spec);
    ASSERT_FALSE(r.failure) << spec;
    EXPECT_EQ(r.layout.chunks_join, std::string{spec}.starts_with("vmm_pool")) << spec;
    EXPECT_EQ(r.at_peak.largest_free_bytes, largest_free_from_arrays(p, r)) << spec;
  }
}

TEST(Replay, OutOfMemoryLeavesLaterAllocationsWithoutAddress)
{
  temp_trace t{
      "0,1,allocate,0x10,4096,0\n"
      "0,2,allocate,0x20,4096,0\n"
      "0,3,allocate,0x30,65536,0\n"
      "0,4,allocate,0x40,64,0\n"};
  auto p = profile_trace(t.path);
  simulated sim{16384};
  auto r = sim.run(p, "cuda");
  ASSERT_TRUE(r.failure);
  EXPECT_EQ(p.allocation_log.size(), 4U);
  EXPECT_EQ(r.layout.addresses.size(), 2U);  // the 3rd failed, the 4th never ran
}

// Call stacks of the Frames column are interned: distinct frames and stacks, by index.
TEST(Replay, FramesBecomeStacksOfTheAllocations)
{
  std::string const path =
      (std::filesystem::temp_directory_path() / ("frames." + std::to_string(::getpid()) + ".csv"))
          .string();
  std::ofstream{path} << "Thread,Time,Action,Pointer,Size,Stream,Frames\n"
                         "0,1,allocate,0x10,512,0,f (a.py:1)|main (m.py:9)\n"
                         "0,2,allocate,0x20,512,0,g (b.py:2)|main (m.py:9)\n"
                         "0,3,allocate,0x30,512,0,f (a.py:1)|main (m.py:9)\n"
                         "0,4,free,0x10,512,0,\n"
                         "0,5,allocate,0x40,512,0\n";
  auto p = profile_trace(path);
  std::remove(path.c_str());
  ASSERT_EQ(p.frames.size(), 3U);
  EXPECT_EQ(p.frames[0], "f (a.py:1)");
  EXPECT_EQ(p.frames[1], "main (m.py:9)");
  EXPECT_EQ(p.frames[2], "g (b.py:2)");
  ASSERT_EQ(p.stacks.size(), 2U);
  EXPECT_EQ(p.stacks[0], (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(p.stacks[1], (std::vector<std::uint32_t>{2, 1}));
  ASSERT_EQ(p.allocation_log.size(), 4U);
  EXPECT_EQ(p.allocation_log[0].stack, 0);
  EXPECT_EQ(p.allocation_log[1].stack, 1);
  EXPECT_EQ(p.allocation_log[2].stack, 0);
  EXPECT_EQ(p.allocation_log[3].stack, -1);
}

// Bin slack is internal. binning:min=1KiB,max=4KiB over cuda: bins of 1, 2 and 4 KiB, each a
// fixed_size resource taking 128 blocks from cuda up front: held = 128 * (1 + 2 + 4) KiB = 917504.
// At the peak (after D) A 1000 B sits in a 1 KiB block, C 3000 B and D 4000 B in 4 KiB blocks:
//   internal = (1024 - 1000) + (4096 - 3000) + (4096 - 4000) = 24 + 1096 + 96 = 1216
//   internal fragmentation = 1216 / (8000 + 1216)   (of what the blocks got)
//   free = 917504 - 8000 - 1216 = 908288
//   largest free = the 4 KiB bin's 512 KiB chunk less C's and D's blocks, side by side at one end:
//                  524288 - 8192 = 516096 (the 2 KiB bin's chunk, 262144, is empty but smaller)
// The old count (256-byte rounding only) gave 24 + 72 + 96 = 192.
TEST(Replay, GoldenBinSlackIsInternal)
{
  temp_trace t{golden_body};
  auto p = profile_trace(t.path);
  simulated sim;
  auto r = sim.run(p, "binning:min=1KiB,max=4KiB");
  ASSERT_FALSE(r.failure);
  EXPECT_EQ(r.held_at_start, 917504U);
  EXPECT_EQ(r.at_peak.held_bytes, 917504U);
  EXPECT_EQ(r.at_peak.live_bytes, 8000U);
  EXPECT_EQ(r.at_peak.internal_bytes, 1216U);
  EXPECT_DOUBLE_EQ(r.at_peak.internal_fragmentation(), 1216.0 / 9216.0);
  EXPECT_EQ(r.at_peak.free_bytes, 908288U);
  EXPECT_EQ(r.at_peak.largest_free_bytes, 516096U);
  EXPECT_DOUBLE_EQ(r.at_peak.external_fragmentation(), 1.0 - 516096.0 / 908288.0);
  // The same stack told nothing of its bins counts only the 256-byte rounding.
  replay_options o;
  o.granted_bytes = [](std::size_t n) { return (n + 255) / 256 * 256; };
  EXPECT_EQ(sim.run(p, "binning:min=1KiB,max=4KiB", o).at_peak.internal_bytes, 192U);
}

// caching (bins 8^k from 8^3 = 512 B, one cudaMalloc per new block): A, B, C and D all fall in
// the 8^4 = 4096 B bin; B's block is cached when freed and D reuses it, so held = 3 * 4096.
//   internal = (4096 - 1000) + (4096 - 3000) + (4096 - 4000) = 3096 + 1096 + 96 = 4288
//   free = 12288 - 8000 - 4288 = 0
TEST(Replay, GoldenCachingBinsAreInternal)
{
  temp_trace t{golden_body};
  auto p = profile_trace(t.path);
  simulated sim;
  auto r = sim.run(p, "caching");
  ASSERT_FALSE(r.failure);
  EXPECT_EQ(r.at_peak.internal_bytes, 4288U);
  EXPECT_EQ(r.at_peak.held_bytes, 12288U);
  EXPECT_EQ(r.at_peak.free_bytes, 0U);
}

// --driver-calls: the replay reports the driver calls the stack made, by kind, and they are the
// calls the simulated device saw in that replay.
TEST(Replay, DriverCallsOfAReplayAreTheCallsTheDeviceSaw)
{
  std::string body;
  for (int i = 0; i < 40; ++i) {  // growing blocks, every other one freed: growths and moves
    body += "0," + std::to_string(2 * i + 1) + ",allocate,0x" + std::to_string(100 + i) + "," +
            std::to_string((i % 7 + 1) * 3 * MiB) + ",0\n";
    if (i % 2 == 1) {
      body += "0," + std::to_string(2 * i + 2) + ",free,0x" + std::to_string(99 + i) + "," +
              std::to_string(((i - 1) % 7 + 1) * 3 * MiB) + ",0\n";
    }
  }
  temp_trace const t{body};
  auto const profile = profile_trace(t.path);
  simulated s;
  auto stack        = spec::build("vmm_pool:handle=4MiB", s.meter, true);
  auto const silent = replay(profile, stack, s.meter);
  EXPECT_FALSE(silent.driver_calls) << "counted only when asked";

  simulated cold;
  auto fresh = spec::build("vmm_pool:handle=4MiB", cold.meter, true);
  cold.meter.count_driver_calls(true);
  auto const before = cold.rt.calls();
  auto const r      = replay(profile, fresh, cold.meter);
  auto const after  = cold.rt.calls();
  ASSERT_TRUE(r.driver_calls);
  auto const& c = *r.driver_calls;
  EXPECT_GT(c[driver_call::create].calls, 0U);
  EXPECT_GT(c[driver_call::map].calls, 0U);
  EXPECT_GT(c[driver_call::set_access].calls, 0U);
  EXPECT_EQ(c[driver_call::create].calls, after.vmm_create - before.vmm_create);
  EXPECT_EQ(c[driver_call::map].calls, after.vmm_map - before.vmm_map);
  EXPECT_EQ(c[driver_call::unmap].calls, after.vmm_unmap - before.vmm_unmap);
  EXPECT_EQ(c[driver_call::release].calls, after.vmm_release - before.vmm_release);
  EXPECT_EQ(c[driver_call::event_record].calls, after.event_record - before.event_record);
  EXPECT_EQ(c[driver_call::event_query].calls, after.event_query - before.event_query);
  EXPECT_EQ(c[driver_call::event_synchronize].calls + c[driver_call::stream_synchronize].calls +
                c[driver_call::device_synchronize].calls,
            after.synchronize - before.synchronize);
  EXPECT_GT(c[driver_call::create].nanoseconds, 0U);
  EXPECT_EQ(c.total_calls(), [&] {
    std::uint64_t n{};
    for (auto const& k : c.of) { n += k.calls; }
    return n;
  }());
}

}  // namespace
}  // namespace gpumem::trace
