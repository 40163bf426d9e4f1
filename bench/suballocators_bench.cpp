// Microbenchmarks of pool_memory_resource, fixed_size_memory_resource and binning_memory_resource
// over a simulated device (host_runtime: simulated addresses, every stream's work completes at
// once), beside the simulated cudaMalloc they sit on. Host-side cost only: ratios say something,
// absolute times are not GPU times. Workloads of ../shared/BENCHMARKS.md: pair (256 B .. 256 MiB),
// random_small (200k ops, 256 B .. 4 MiB log-uniform, <= 1000 live) and threads (T threads, own
// stream each, 256 B .. 64 KiB, <= 64 live each; aggregate items/s).
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/binning_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/fixed_size_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>

#include <benchmark/benchmark.h>
#include "support/workloads.hpp"

#include <cmath>
#include <memory>
#include <random>
#include <vector>

namespace gpumem::bench {
namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;

using upstream_t = mr::cuda_memory_resource;

/// One simulated 80 GiB device for the whole run; never destroyed.
struct sim_device {
  detail::host_runtime rt{detail::host_runtime_options{.backed = false, .auto_complete = true}};
  upstream_t cuda{rt};
  std::vector<cudaStream_t> streams;  // stream i serves benchmark thread i (reused across runs)
  sim_device()
  {
    for (int i = 0; i < 16; ++i) { streams.push_back(rt.create_stream()); }
  }
};
sim_device& dev()
{
  static auto* d = new sim_device{};
  return *d;
}

enum class kind { cuda, pool, fixed_size, binning };

enum class workload { pair, random_small, threads };

/// The resources of one workload, built once and kept for the run; each workload has its own, so
/// one workload's leftover free lists do not shape the next one's.
struct resources {
  mr::pool_memory_resource<upstream_t> pool{&dev().cuda, 256 * MiB, std::nullopt, dev().rt};
  mr::fixed_size_memory_resource<upstream_t> fixed{&dev().cuda, MiB, 128, dev().rt};
  mr::binning_memory_resource<upstream_t> bins{&dev().cuda, std::int8_t{8}, std::int8_t{22},
                                               dev().rt};
};

mr::device_memory_resource& resource(kind k, workload w)
{
  static auto* sets = new resources[3];  // thread-safe static init; never destroyed
  auto& set         = sets[static_cast<int>(w)];
  switch (k) {
    case kind::pool:
      return set.pool;
    case kind::fixed_size:
      return set.fixed;
    case kind::binning:
      return set.bins;
    default:
      return dev().cuda;
  }
}

// -- pair: allocate + free one size in a loop on one stream -----------------------------------
void pair(benchmark::State& state, kind k)
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
void random_small(benchmark::State& state, kind k)
{
  auto& mr         = resource(k, workload::random_small);
  auto const hi    = k == kind::fixed_size ? MiB : 4 * MiB;  // fixed_size holds <= its block size
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
void threads(benchmark::State& state, kind k)
{
  ring_of_live_blocks(state, resource(k, workload::threads),
                      dev().streams[static_cast<std::size_t>(state.thread_index())]);
}

void register_all()
{
  struct entry {
    char const* name;
    kind k;
    std::size_t max_pair;
  };
  entry const subjects[] = {{"cuda_sim", kind::cuda, 256 * MiB},
                            {"pool", kind::pool, 256 * MiB},
                            {"fixed_size", kind::fixed_size, MiB},
                            {"binning", kind::binning, 256 * MiB}};
  for (auto const& e : subjects) {
    auto* p = benchmark::RegisterBenchmark((std::string{"pair/"} + e.name).c_str(), pair, e.k);
    for (std::size_t n : {256 * std::size_t{1}, 4 * KiB, 64 * KiB, MiB, 16 * MiB, 256 * MiB}) {
      if (n <= e.max_pair) { p->Arg(static_cast<std::int64_t>(n)); }
    }
    if (e.k == kind::cuda) { continue; }
    benchmark::RegisterBenchmark((std::string{"random_small/"} + e.name).c_str(), random_small, e.k)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string{"threads/"} + e.name).c_str(), threads, e.k)
        ->ThreadRange(1, 16)
        ->UseRealTime();
  }
}

int const registered = (register_all(), 0);

}  // namespace
}  // namespace gpumem::bench
