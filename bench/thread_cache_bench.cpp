// Microbenchmarks of thread_cache_resource_adaptor over a simulated device (host_runtime:
// simulated addresses, every stream's work completes at once), beside the pool it sits on and
// binning over a pool. Host-side cost only: ratios say something, absolute times are not GPU
// times. Workloads of ../shared/BENCHMARKS.md: pair (256 B .. 1 MiB, the sizes the cache serves by
// default) and threads (T threads, own stream each, 256 B .. 64 KiB, <= 64 live each; aggregate
// items/s). Frees by another thread are not timed here; the stress test exercises them.
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/binning_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/thread_cache_resource_adaptor.hpp>

#include <benchmark/benchmark.h>
#include "support/workloads.hpp"

#include <cmath>
#include <random>
#include <vector>

namespace gpumem::bench {
namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;

using upstream_t = mr::cuda_memory_resource;
using pool_t     = mr::pool_memory_resource<upstream_t>;

/// One simulated 80 GiB device for the whole run; never destroyed.
struct sim_device {
  detail::host_runtime rt{detail::host_runtime_options{.backed = false, .auto_complete = true}};
  upstream_t cuda{rt};
  std::vector<cudaStream_t> streams;  // stream i serves benchmark thread i
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

enum class kind { pool, thread_cache, binning };

/// One stack per benchmark function, built once and kept for the run (never destroyed).
struct stack {
  pool_t pool{&dev().cuda, 256 * MiB, std::nullopt, dev().rt};
  mr::thread_cache_resource_adaptor<pool_t> cache{&pool};
  mr::binning_memory_resource<pool_t> bins{&pool, std::int8_t{8}, std::int8_t{22}, dev().rt};

  mr::device_memory_resource& get(kind k)
  {
    if (k == kind::thread_cache) { return cache; }
    return k == kind::binning ? static_cast<mr::device_memory_resource&>(bins) : pool;
  }
};

enum class workload { pair, threads };

mr::device_memory_resource& resource(kind k, workload w)
{
  static auto* stacks = new stack[2];  // thread-safe static init; never destroyed
  return stacks[static_cast<int>(w)].get(k);
}

void pair(benchmark::State& state, kind k)
{
  auto& mr             = resource(k, workload::pair);
  auto const bytes     = static_cast<std::size_t>(state.range(0));
  cudaStream_t const s = dev().streams[0];
  mr.deallocate(mr.allocate(bytes, s), bytes, s);  // warm
  for (auto _ : state) {
    void* p = mr.allocate(bytes, s);
    benchmark::DoNotOptimize(p);
    mr.deallocate(p, bytes, s);
  }
}

/// Each thread keeps a ring of 64 live blocks: free the oldest, allocate a new one.
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
  };
  entry const subjects[] = {{"pool", kind::pool},
                            {"thread_cache>pool", kind::thread_cache},
                            {"binning>pool", kind::binning}};
  for (auto const& e : subjects) {
    auto* p = benchmark::RegisterBenchmark((std::string{"pair/"} + e.name).c_str(), pair, e.k);
    for (std::size_t n : {256 * std::size_t{1}, 4 * KiB, 64 * KiB, MiB}) {
      p->Arg(static_cast<std::int64_t>(n));
    }
    benchmark::RegisterBenchmark((std::string{"threads/"} + e.name).c_str(), threads, e.k)
        ->ThreadRange(1, 16)
        ->UseRealTime();
  }
}

int const registered = (register_all(), 0);

}  // namespace
}  // namespace gpumem::bench
