// The log replays: a log produced by logging_resource_adaptor, read back through the trace
// reader (gpumem/trace), gives back every event as it happened and replays on a fresh resource.
#include "adaptor_test_support.hpp"

#include <gpumem/mr/logging_resource_adaptor.hpp>
#include <gpumem/trace/trace_reader.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

struct op {
  trace::action act;
  std::uint64_t pointer;
  std::uint64_t size;
  std::uint64_t stream;
};

/// Random allocations and frees on two streams from one thread, with an injected failure.
std::vector<op> run_workload(mr::device_memory_resource& mr, detail::host_runtime& rt,
                             unsigned seed)
{
  std::mt19937 rng{seed};
  cudaStream_t const streams[] = {cudaStream_t{}, rt.create_stream()};
  std::vector<op> ops;
  std::vector<std::pair<void*, std::size_t>> live;
  auto const id = [](auto p) {
    return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
  };
  bool failed = false;
  for (int i = 0; i < 300; ++i) {
    auto const s = streams[i % 2];
    if (live.empty() || rng() % 3 != 0) {
      std::size_t const n = 1 + rng() % 100000;
      if (i >= 150 && !failed) {  // one failed allocation half way
        rt.fail_next_allocations(1);
        failed = true;
      }
      try {
        live.emplace_back(mr.allocate(n, s), n);
        ops.push_back({trace::action::allocate, id(live.back().first), n, id(s)});
      } catch (gpumem::out_of_memory const&) {
        ops.push_back({trace::action::allocate_failure, 0, n, id(s)});
      }
    } else {
      auto const [p, n] = live[rng() % live.size()];
      std::erase(live, std::pair{p, n});
      mr.deallocate(p, n, s);
      ops.push_back({trace::action::free, id(p), n, id(s)});
    }
  }
  for (auto [p, n] : live) {
    mr.deallocate(p, n);
    ops.push_back({trace::action::free, id(p), n, 0});
  }
  return ops;
}

TEST_F(host_upstream, LoggedWorkloadReadsBackThroughTheTraceReaderAndReplays)
{
  auto const path = (std::filesystem::temp_directory_path() /
                     ("gpumem_round_trip." + std::to_string(::getpid()) + ".csv"))
                        .string();
  std::vector<op> ops;
  {
    mr::logging_resource_adaptor<mr::cuda_memory_resource> logger{&base, path};
    ops = run_workload(logger, rt, 7);
  }
  auto const events = trace::read_all(path);
  std::remove(path.c_str());
  ASSERT_EQ(events.size(), ops.size());
  ASSERT_EQ(std::count_if(ops.begin(), ops.end(),
                          [](op const& o) { return o.act == trace::action::allocate_failure; }),
            1);
  std::uint64_t last_time = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(events[i].act, ops[i].act) << "event " << i;
    EXPECT_EQ(events[i].pointer, ops[i].pointer) << "event " << i;
    EXPECT_EQ(events[i].size, ops[i].size) << "event " << i;
    EXPECT_EQ(events[i].stream, ops[i].stream) << "event " << i;
    EXPECT_EQ(events[i].thread, 0u);
    EXPECT_GE(events[i].time, last_time);
    last_time = events[i].time;
  }
  // Replay on a fresh resource: every free names a pointer the trace allocated and not yet freed.
  detail::host_runtime fresh_rt{};
  mr::cuda_memory_resource fresh{fresh_rt};
  std::map<std::uint64_t, std::pair<void*, std::size_t>> replayed;
  for (auto const& e : events) {
    if (e.act == trace::action::allocate) {
      ASSERT_TRUE(replayed.emplace(e.pointer, std::pair{fresh.allocate(e.size), e.size}).second);
    } else if (e.act == trace::action::free) {
      auto it = replayed.find(e.pointer);
      ASSERT_NE(it, replayed.end()) << "free of a pointer not live in the trace";
      ASSERT_EQ(it->second.second, e.size);
      fresh.deallocate(it->second.first, e.size);
      replayed.erase(it);
    }
  }
  EXPECT_TRUE(replayed.empty());
  EXPECT_EQ(fresh_rt.live_allocations(), 0u);
}

}  // namespace
}  // namespace gpumem::test
