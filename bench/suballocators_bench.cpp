// Microbenchmarks of pool_memory_resource, fixed_size_memory_resource and binning_memory_resource
// over a simulated device (host_runtime: simulated addresses, every stream's work completes at
// once), beside the simulated cudaMalloc they sit on. Each stack is built from its spec by the
// resource factory, as the gpumem tool builds it. Host-side cost only: ratios say something,
// absolute times are not GPU times. Workloads (docs/benchmarks.md): pair (256 B .. 256 MiB),
// random_small (200k ops, 256 B .. 4 MiB log-uniform, <= 1000 live) and threads (T threads, own
// stream each, 256 B .. 64 KiB, <= 64 live each; aggregate items/s).
#include <gpumem/mr/device_memory_resource.hpp>

#include <benchmark/benchmark.h>
#include "support/simulated_stacks.hpp"
#include "support/workloads.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

namespace gpumem::bench {
namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;

/// What is measured: a name, the spec of its stack, and the largest block it serves.
struct subject {
  char const* name;
  char const* spec;
  std::size_t max_bytes;
};
constexpr std::array<subject, 4> subjects{{
    {"cuda_sim", "cuda", 256 * MiB},
    {"pool", "pool:initial=256MiB>cuda", 256 * MiB},
    {"fixed_size", "fixed_size:block=1MiB,blocks=128>cuda", MiB},  // holds <= its block size
    {"binning", "binning:min=256B,max=4MiB>cuda", 256 * MiB},
}};

enum class workload { pair, random_small, threads };
constexpr std::size_t workload_count = 3;

/// The stack of `subject` for workload `w`, built once and kept for the run (never destroyed).
mr::device_memory_resource& resource(std::size_t subject, workload w)
{
  static auto* table = [] {  // thread-safe static init
    std::vector<std::string> specs;
    for (auto const& s : subjects) { specs.emplace_back(s.spec); }
    return new stack_table{specs, workload_count};
  }();
  return table->get(subject, static_cast<std::size_t>(w));
}

// -- pair: allocate + free one size in a loop on one stream -----------------------------------
void pair(benchmark::State& state, std::size_t k)
{
  auto& mr             = resource(k, workload::pair);
  auto const bytes     = static_cast<std::size_t>(state.range(0));
  cudaStream_t const s = dev().streams[static_cast<std::size_t>(state.thread_index())];
  mr.deallocate(mr.allocate(bytes, s), bytes, s);  // warm
  for (auto _ : state) {
    void* p = mr.allocate(bytes, s);
    benchmark::DoNotOptimize(p);
    mr.deallocate(p, bytes, s);
  }
}

// -- random_small: 200k ops, <= 1000 live, random interleaving --------------------------------
void random_small(benchmark::State& state, std::size_t k)
{
  auto& mr         = resource(k, workload::random_small);
  auto const hi    = std::min(subjects[k].max_bytes, 4 * MiB);
  auto const sizes = log_uniform_sizes(200'000, 256, hi, 7);
  std::mt19937_64 rng{11};
  std::vector<std::pair<void*, std::size_t>> live;
  live.reserve(1000);
  cudaStream_t const s = dev().streams[static_cast<std::size_t>(state.thread_index())];
  for (auto _ : state) {
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      if (live.size() < 1000 && (live.empty() || rng() % 2 == 0)) {
        live.emplace_back(mr.allocate(sizes[i], s), sizes[i]);
      } else {
        auto const at = rng() % live.size();
        mr.deallocate(live[at].first, live[at].second, s);
        live[at] = live.back();
        live.pop_back();
      }
    }
    for (auto [p, n] : live) { mr.deallocate(p, n, s); }
    live.clear();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(sizes.size()));
}

// -- threads: T threads, own stream each, <= 64 live each; aggregate items (ops) per second -----
void threads(benchmark::State& state, std::size_t k)
{
  ring_of_live_blocks(state, resource(k, workload::threads),
                      dev().streams[static_cast<std::size_t>(state.thread_index())]);
}

void register_all()
{
  for (std::size_t k = 0; k < subjects.size(); ++k) {
    auto const& e = subjects[k];
    auto* p       = benchmark::RegisterBenchmark((std::string{"pair/"} + e.name).c_str(), pair, k);
    for (std::size_t n : {256 * std::size_t{1}, 4 * KiB, 64 * KiB, MiB, 16 * MiB, 256 * MiB}) {
      if (n <= e.max_bytes) { p->Arg(static_cast<std::int64_t>(n)); }
    }
    if (k == 0) { continue; }  // the simulated cudaMalloc: pair only
    benchmark::RegisterBenchmark((std::string{"random_small/"} + e.name).c_str(), random_small, k)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string{"threads/"} + e.name).c_str(), threads, k)
        ->ThreadRange(1, 16)
        ->UseRealTime();
  }
}

int const registered = (register_all(), 0);

}  // namespace
}  // namespace gpumem::bench
