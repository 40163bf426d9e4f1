// What pause and resume of vmm_pool_memory_resource cost: 1 GiB and 8 GiB of live allocations of
// 64 / 128 / 256 MiB (in turn), paused and resumed again and again, discarding or offloading the
// contents (pinned host staging kept between pauses, as an engine that sleeps and wakes often
// would). Per iteration: one pause + one resume (manual time); counters split them and give the
// rate in GiB/s of pool memory. Handles of 16 MiB (default) and 256 MiB. On a GPU these are the
// real calls; without one, the host stand-in's simulated memory (CI runs the code; the times then
// mean nothing). Reference: a handle's create + release and map + access + unmap in
// vmm_driver_bench (rows create_release/16 and cycle/16: tens of microseconds each), so discard
// is bounded below by about their sum per handle.
//   vmm_pause_bench --benchmark_filter=pause_resume
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/detail/runtime.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <benchmark/benchmark.h>

#include <cuda_runtime_api.h>

#include <chrono>
#include <vector>

namespace gpumem::bench {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;

gpumem::runtime& rt()
{
  static gpumem::runtime* r = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) { return &gpumem::cuda_device(); }
    (void)cudaGetLastError();
    return static_cast<gpumem::runtime*>(new detail::host_runtime{
        detail::host_runtime_options{.capacity_bytes = 80 * GiB, .backed = false}});
  }();
  return *r;
}

double seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b)
{
  return std::chrono::duration<double>(b - a).count();
}

// Args: GiB of allocations, 0 discard / 1 offload, handle MiB.
void pause_resume(benchmark::State& state)
{
  auto const total  = static_cast<std::size_t>(state.range(0)) * GiB;
  auto const mode   = state.range(1) == 0 ? pause_mode::discard : pause_mode::offload;
  auto const handle = static_cast<std::size_t>(state.range(2)) * MiB;
  mr::vmm_pool_memory_resource pool{
      mr::vmm_pool_options{
          .reserve_bytes = 2 * total, .handle_bytes = handle, .keep_offload_staging = true},
      rt()};
  std::vector<std::pair<void*, std::size_t>> live;
  std::size_t const sizes[] = {64 * MiB, 128 * MiB, 256 * MiB};
  for (std::size_t held = 0, i = 0; held < total; ++i) {
    auto const n = std::min(sizes[i % 3], total - held);
    live.emplace_back(pool.allocate(n), n);
    held += n;
  }
  auto const mapped = pool.stats().mapped_bytes;
  pool.pause(mode);  // the first offload pins its host memory: not timed
  pool.resume();
  double paused{};
  double resumed{};
  for (auto _ : state) {
    auto const t0 = std::chrono::steady_clock::now();
    pool.pause(mode);
    auto const t1 = std::chrono::steady_clock::now();
    pool.resume();
    auto const t2 = std::chrono::steady_clock::now();
    paused += seconds(t0, t1);
    resumed += seconds(t1, t2);
    state.SetIterationTime(seconds(t0, t2));
  }
  auto const n                    = static_cast<double>(state.iterations());
  auto const gib                  = static_cast<double>(mapped) / static_cast<double>(GiB);
  auto const handles              = static_cast<double>(pool.stats().handles);
  state.counters["pause_ms"]      = paused / n * 1e3;
  state.counters["resume_ms"]     = resumed / n * 1e3;
  state.counters["pause_GiB/s"]   = gib / (paused / n);
  state.counters["resume_GiB/s"]  = gib / (resumed / n);
  state.counters["handles"]       = handles;
  state.counters["us_per_handle"] = (paused + resumed) / n / handles * 1e6;
  for (auto const& [p, bytes] : live) { pool.deallocate(p, bytes); }
  state.SetLabel(std::string{rt().name()} +
                 (mode == pause_mode::discard ? " discard" : " offload"));
}

BENCHMARK(pause_resume)
    ->ArgsProduct({{1, 8}, {0, 1}, {16, 256}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

}  // namespace
}  // namespace gpumem::bench
