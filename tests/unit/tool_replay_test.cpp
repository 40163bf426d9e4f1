// The replayer: golden numbers on hand-made traces (computed by hand below), anomalies counted
// not fatal, out-of-memory at the event with the stack's state, --threads keeping the order.
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/spec/resource_factory.hpp>
#include <gpumem/trace/replay.hpp>

#include <gtest/gtest.h>

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

TEST(Replay, GoldenPoolNumbers)
{
  temp_trace t{golden_body};
  auto p = profile_trace(t.path);
  simulated sim;
  auto r = sim.run(p, "pool:initial=1MiB");
  ASSERT_FALSE(r.failure);
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
  EXPECT_DOUBLE_EQ(s.internal_fragmentation(), 192.0 / 1048576.0);
  EXPECT_EQ(r.operations, 8U);
  EXPECT_EQ(sim.meter.held_bytes(), 0U);  // the stack (and its pool) is gone after the run
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

}  // namespace
}  // namespace gpumem::trace
