// What the virtual-memory pool's slow paths cost: the driver's cuMem* calls one by one (create +
// release, map + unmap, set access) at the handle sizes the pool uses, and an idle device
// synchronization. On a GPU these are the real calls; without one, the host stand-in's (so that
// CI runs the code; the times then mean nothing). Per-iteration time = one call pair.
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/detail/runtime.hpp>

#include <benchmark/benchmark.h>

#include <cuda_runtime_api.h>

#include <chrono>
#include <vector>

namespace gpumem::bench {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

gpumem::runtime& rt()
{
  static gpumem::runtime* r = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) { return &gpumem::cuda_device(); }
    (void)cudaGetLastError();
    return static_cast<gpumem::runtime*>(new detail::host_runtime{});  // never destroyed
  }();
  return *r;
}

/// A reservation of `bytes` for one benchmark, given back at its end.
struct range {
  std::size_t bytes;
  void* base = rt().vmm_reserve(bytes, rt().vmm_granularity(0));
  explicit range(std::size_t n) : bytes{n} {}
  ~range() { rt().vmm_unreserve(base, bytes); }
};

void create_release(benchmark::State& state)
{
  auto const bytes = static_cast<std::size_t>(state.range(0)) * MiB;
  for (auto _ : state) { rt().vmm_release(rt().vmm_create(bytes, 0, {})); }
  state.SetLabel(rt().name());
}

void map_access_unmap(benchmark::State& state)
{
  auto const bytes = static_cast<std::size_t>(state.range(0)) * MiB;
  range r{bytes};
  auto const h = rt().vmm_create(bytes, 0, {});
  for (auto _ : state) {
    rt().vmm_map(r.base, bytes, h);
    rt().vmm_set_access(r.base, bytes, 0);
    rt().vmm_unmap(r.base, bytes);
  }
  rt().vmm_release(h);
  state.SetLabel(rt().name());
}

void map_unmap(benchmark::State& state)
{
  auto const bytes = static_cast<std::size_t>(state.range(0)) * MiB;
  range r{bytes};
  auto const h = rt().vmm_create(bytes, 0, {});
  for (auto _ : state) {
    rt().vmm_map(r.base, bytes, h);
    rt().vmm_unmap(r.base, bytes);
  }
  rt().vmm_release(h);
  state.SetLabel(rt().name());
}

/// Access granted once over `count` handles of 16 MiB mapped side by side (the pool does one
/// set-access call per growth): per-iteration time covers map all + one access + unmap all.
void map_many_one_access(benchmark::State& state)
{
  auto const count           = static_cast<std::size_t>(state.range(0));
  constexpr std::size_t each = 16 * MiB;
  range r{count * each};
  std::vector<gpumem::vmm_handle> hs;
  for (std::size_t i = 0; i < count; ++i) { hs.push_back(rt().vmm_create(each, 0, {})); }
  for (auto _ : state) {
    for (std::size_t i = 0; i < count; ++i) {
      rt().vmm_map(static_cast<char*>(r.base) + i * each, each, hs[i]);
    }
    rt().vmm_set_access(r.base, count * each, 0);
    for (std::size_t i = 0; i < count; ++i) {
      rt().vmm_unmap(static_cast<char*>(r.base) + i * each, each);
    }
  }
  for (auto h : hs) { rt().vmm_release(h); }
  state.SetLabel(rt().name());
}

/// One step of a map -> set access -> unmap cycle timed alone (the others run untimed), at a fresh
/// address each time (`fresh`: as when memory grows) or at the same address (as when the pool
/// moves a handle back and forth). Arg 0: which step (0 map, 1 set access, 2 unmap).
void one_step(benchmark::State& state, bool fresh)
{
  auto const step            = state.range(0);
  constexpr std::size_t each = 16 * MiB;
  constexpr std::size_t n    = 64;  // addresses cycled through
  range r{n * each};
  auto const h = rt().vmm_create(each, 0, {});
  std::size_t i{};
  for (auto _ : state) {
    auto* at   = static_cast<char*>(r.base) + (fresh ? (i++ % n) * each : 0);
    auto timed = [&](int which, auto&& f) {
      if (which != step) { return f(); }
      auto const t0 = std::chrono::steady_clock::now();
      f();
      state.SetIterationTime(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    };
    timed(0, [&] { rt().vmm_map(at, each, h); });
    timed(1, [&] { rt().vmm_set_access(at, each, 0); });
    timed(2, [&] { rt().vmm_unmap(at, each); });
  }
  rt().vmm_release(h);
  state.SetLabel(rt().name());
}
void step_at_fresh_addresses(benchmark::State& state)
{
  one_step(state, true);
}
void step_at_one_address(benchmark::State& state)
{
  one_step(state, false);
}

void idle_device_synchronize(benchmark::State& state)
{
  for (auto _ : state) { rt().device_synchronize(); }
  state.SetLabel(rt().name());
}

BENCHMARK(create_release)->Arg(2)->Arg(16)->Arg(64)->Unit(benchmark::kMicrosecond);
BENCHMARK(map_unmap)->Arg(2)->Arg(16)->Arg(64)->Unit(benchmark::kMicrosecond);
BENCHMARK(map_access_unmap)->Arg(2)->Arg(16)->Arg(64)->Unit(benchmark::kMicrosecond);
BENCHMARK(map_many_one_access)->Arg(4)->Arg(16)->Unit(benchmark::kMicrosecond);
// A fixed count: with manual time, a step of a few microseconds would otherwise run the whole
// ~1 ms cycle until its own time added up to the benchmark's minimum.
BENCHMARK(step_at_fresh_addresses)
    ->DenseRange(0, 2)
    ->UseManualTime()
    ->Iterations(200)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(step_at_one_address)
    ->DenseRange(0, 2)
    ->UseManualTime()
    ->Iterations(200)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(idle_device_synchronize)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gpumem::bench
