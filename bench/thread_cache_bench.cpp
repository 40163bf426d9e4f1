// Microbenchmarks of thread_cache_resource_adaptor over a simulated device (host_runtime:
// simulated addresses, every stream's work completes at once), beside a pool like the one it sits
// on and binning over a pool. Each stack is built from its spec (the benchmark's name) by the
// resource factory, as the gpumem tool builds it. Host-side cost only: ratios say something,
// absolute times are not GPU times. Workloads (docs/benchmarks.md): pair (256 B .. 1 MiB, the
// sizes the cache serves by default) and threads (T threads, own stream each, 256 B .. 64 KiB,
// <= 64 live each; aggregate items/s). Frees by another thread are not timed here; the stress
// test exercises them.
#include <gpumem/mr/device_memory_resource.hpp>

#include <benchmark/benchmark.h>
#include "support/simulated_stacks.hpp"
#include "support/workloads.hpp"

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

/// The stacks measured, by spec (the pool's default: 256 MiB taken at construction).
constexpr std::array<char const*, 3> subjects{"pool", "thread_cache>pool", "binning>pool"};

enum class workload { pair, threads };
constexpr std::size_t workload_count = 2;

/// The stack of `subject` for workload `w`, built once and kept for the run (never destroyed).
mr::device_memory_resource& resource(std::size_t subject, workload w)
{
  static auto* table = new stack_table{{subjects.begin(), subjects.end()}, workload_count};
  return table->get(subject, static_cast<std::size_t>(w));
}

void pair(benchmark::State& state, std::size_t k)
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
void threads(benchmark::State& state, std::size_t k)
{
  ring_of_live_blocks(state, resource(k, workload::threads),
                      dev().streams[static_cast<std::size_t>(state.thread_index())]);
}

void register_all()
{
  for (std::size_t k = 0; k < subjects.size(); ++k) {
    std::string const name = subjects[k];
    auto* p                = benchmark::RegisterBenchmark(("pair/" + name).c_str(), pair, k);
    for (std::size_t n : {256 * std::size_t{1}, 4 * KiB, 64 * KiB, MiB}) {
      p->Arg(static_cast<std::int64_t>(n));
    }
    benchmark::RegisterBenchmark(("threads/" + name).c_str(), threads, k)
        ->ThreadRange(1, 16)
        ->UseRealTime();
  }
}

int const registered = (register_all(), 0);

}  // namespace
}  // namespace gpumem::bench
