// End-to-end simulated replay throughput (issue 6's target: >= 5 million events/s for the pool):
// read a synthetic CSV trace and replay it over a stack on the simulated device, as `gpumem replay`
// does (profile_and_replay: the trace is parsed and profiled on one thread while the caller's
// thread replays it). replay_end_to_end reports items_per_second = trace events per second of wall
// time (the figure a user waits for), with the process CPU time of all threads beside it;
// profile_then_replay is the same work in two passes, one after the other. The other benchmarks
// take the parts alone, per second of process CPU time. Host time only.
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/spec/resource_factory.hpp>
#include <gpumem/replay/replay.hpp>
#include <gpumem/trace/trace_writer.hpp>

#include <benchmark/benchmark.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <utility>

namespace {

using namespace gpumem;

constexpr std::uint64_t trace_events = 500'000;

/// A file removed when the program ends.
struct removed_at_exit {
  std::string path;
  explicit removed_at_exit(std::string p) : path{std::move(p)} {}
  removed_at_exit(removed_at_exit const&)            = delete;
  removed_at_exit& operator=(removed_at_exit const&) = delete;
  ~removed_at_exit() { std::remove(path.c_str()); }
};

/// A synthetic trace: log-uniform sizes 256 B..64 MiB, at most 4096 live, random frees. (Removed
/// at exit by the static's destructor: an atexit handler registered while the static was being
/// made ran after the static was destroyed, read a dead string and left the file behind.)
std::string const& synthetic_trace()
{
  static removed_at_exit const file{[] {
    auto p = (std::filesystem::temp_directory_path() /
              ("gpumem_replay_bench." + std::to_string(::getpid()) + ".csv"))
                 .string();
    trace::trace_writer w{p};
    std::mt19937_64 rng{1};
    std::uniform_real_distribution<double> log_size{std::log(256.0), std::log(64.0 * (1 << 20))};
    std::vector<std::pair<std::uint64_t, std::uint64_t>> live;
    std::uint64_t next = 0x7f0000000000ULL;
    for (std::uint64_t i = 0; i < trace_events; ++i) {
      trace::event e;
      e.time = i;
      if (live.empty() || (live.size() < 4096 && (rng() & 1) == 0)) {
        e.size    = static_cast<std::uint64_t>(std::exp(log_size(rng)));
        e.pointer = next;
        next += (e.size + 511) & ~std::uint64_t{255};
        live.emplace_back(e.pointer, e.size);
      } else {
        auto const k                = rng() % live.size();
        e.act                       = trace::action::free;
        std::tie(e.pointer, e.size) = live[k];
        live[k]                     = live.back();
        live.pop_back();
      }
      w.write(e);
    }
    return p;
  }()};
  return file.path;
}

/// One replay of `profile` over a fresh simulated device and the stack `spec`.
void replay_once(trace::trace_profile const& profile, char const* spec)
{
  detail::host_runtime rt{{.backed = false, .auto_complete = true}};
  trace::metered_runtime meter{rt};
  auto stack  = spec::build(spec, meter, true);
  auto result = trace::replay(profile, stack, meter);
  benchmark::DoNotOptimize(result.peak_held_bytes);
}

void replay_end_to_end(benchmark::State& state, char const* spec)
{
  auto const& path = synthetic_trace();
  for (auto _ : state) {
    detail::host_runtime rt{{.backed = false, .auto_complete = true}};
    trace::metered_runtime meter{rt};
    auto stack = spec::build(spec, meter, true);
    auto run   = trace::profile_and_replay(path, stack, meter);
    benchmark::DoNotOptimize(run.result.peak_held_bytes);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * trace_events));
}

void profile_then_replay(benchmark::State& state, char const* spec)
{
  auto const& path = synthetic_trace();
  for (auto _ : state) { replay_once(trace::profile_trace(path), spec); }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * trace_events));
}

void replay_only(benchmark::State& state, char const* spec)
{
  auto const profile = trace::profile_trace(synthetic_trace());
  for (auto _ : state) { replay_once(profile, spec); }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * trace_events));
}

/// The replayer's own cost: a resource that bumps a pointer and frees nothing (one virtual call).
class bump_resource final : public mr::device_memory_resource {
  void* do_allocate(std::size_t bytes, cuda_stream_view) override
  {
    next_ += (bytes + 255) & ~std::size_t{255};
    return reinterpret_cast<void*>(next_);
  }
  void do_deallocate(void*, std::size_t, cuda_stream_view) noexcept override {}
  std::uintptr_t next_{0x1000};
};

void replay_overhead(benchmark::State& state)
{
  auto const profile = trace::profile_trace(synthetic_trace());
  detail::host_runtime rt{{.backed = false, .auto_complete = true}};
  trace::metered_runtime meter{rt};
  for (auto _ : state) {
    bump_resource bump;
    auto result = trace::replay(profile, bump, "bump", nullptr, meter);
    benchmark::DoNotOptimize(result.operations);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * trace_events));
}

void parse_only(benchmark::State& state)
{
  auto const& path = synthetic_trace();
  for (auto _ : state) { benchmark::DoNotOptimize(trace::profile_trace(path).events); }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * trace_events));
}

BENCHMARK_CAPTURE(replay_end_to_end, pool, "pool")
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();
BENCHMARK_CAPTURE(profile_then_replay, pool, "pool")
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();
BENCHMARK_CAPTURE(replay_only, pool, "pool")
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime();
BENCHMARK_CAPTURE(replay_only, binning_pool, "binning>pool")
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime();
BENCHMARK_CAPTURE(replay_only, arena, "arena")
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime();
BENCHMARK(replay_overhead)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime();
BENCHMARK(parse_only)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime();

}  // namespace
