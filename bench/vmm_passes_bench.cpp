// What vmm_pool holds when one trace is replayed again and again over the same pool (a process that
// runs the same job many times: each pass builds its model again, runs its steps and frees
// everything): per trace, peak held / peak live after the first pass and after the last, the
// passes after the first that had to create memory, and the handle moves (maps), access grants and
// device synchronizations of the last pass. A pool whose layout repeats itself stays where its
// first pass left it and makes no driver call; one whose layout drifts creeps up. Simulated device
// (host stand-in): the placement is deterministic, so these footprints are a GPU's too (the times
// are not measured here). Each trace with the home layout (the default) and without it.
//   vmm_passes_bench                                    # the two bundled traces, 20 passes
//   GPUMEM_PASSES_TRACES=a.csv:b.csv vmm_passes_bench   # other traces (recorded ones: gunzip
//                                                       # bench/traces/*.csv.gz first)
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>
#include <gpumem/replay/replay.hpp>
#include <gpumem/runtime/metered_runtime.hpp>

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace gpumem::bench {
namespace {

std::vector<std::string> traces()
{
  std::vector<std::string> out;
  if (char const* list = std::getenv("GPUMEM_PASSES_TRACES"); list != nullptr && *list != '\0') {
    std::string const s{list};
    for (std::size_t at = 0; at <= s.size();) {
      auto const end = std::min(s.find(':', at), s.size());
      if (end > at) { out.push_back(s.substr(at, end - at)); }
      at = end + 1;
    }
    return out;
  }
  for (char const* name : {"gpt2_train.csv", "resnet50_train.csv"}) {
    out.push_back((std::filesystem::path{GPUMEM_BUNDLED_TRACES} / name).string());
  }
  return out;
}

// Args: passes, and whether the pool takes its layout home when it is wholly free again
// (vmm_pool_options::return_home). Each iteration replays the trace that many times over one
// fresh pool.
void passes(benchmark::State& state, std::string const& path)
{
  auto const profile = trace::profile_trace(path);
  auto const n       = static_cast<int>(state.range(0));
  double first{}, last{};
  std::uint64_t growing_passes{}, maps{}, grants{}, syncs{};
  for (auto _ : state) {
    detail::host_runtime rt{
        {.capacity_bytes = std::size_t{80} << 30, .backed = false, .auto_complete = true}};
    trace::metered_runtime meter{rt};
    std::map<std::uint64_t, cudaStream_t> streams;  // trace stream -> a stream of the stand-in
    trace::replay_options options;
    options.stream_of = [&](std::uint64_t id) -> cudaStream_t {
      if (id == 0) { return nullptr; }
      auto [it, fresh] = streams.try_emplace(id, nullptr);
      if (fresh) { it->second = rt.create_stream(); }
      return it->second;
    };
    mr::vmm_pool_memory_resource pool{{.return_home = state.range(1) != 0}, meter};
    meter.count_driver_calls(true);
    growing_passes = 0;
    for (int p = 1; p <= n; ++p) {
      auto const r = trace::replay(profile, pool, "vmm_pool", nullptr, meter, options);
      if (r.failure) {
        state.SkipWithError("the replay failed");
        return;
      }
      auto const c            = r.driver_calls.value_or(trace::driver_call_counts{});
      (p == 1 ? first : last) = r.footprint_ratio(profile);
      if (p > 1 && c[trace::driver_call::create].calls > 0) { ++growing_passes; }
      maps   = c[trace::driver_call::map].calls;
      grants = c[trace::driver_call::set_access].calls;
      syncs  = c[trace::driver_call::device_synchronize].calls;
    }
    pool.check_invariants();
  }
  state.counters["held_live_first"] = first;
  state.counters["held_live_last"]  = n > 1 ? last : first;
  state.counters["passes_creating"] = static_cast<double>(growing_passes);
  state.counters["last_maps"]       = static_cast<double>(maps);
  state.counters["last_grants"]     = static_cast<double>(grants);
  state.counters["last_syncs"]      = static_cast<double>(syncs);
}

[[maybe_unused]] bool const registered = [] {
  for (auto const& path : traces()) {
    auto const name = "passes/" + std::filesystem::path{path}.stem().string();
    benchmark::RegisterBenchmark(name.c_str(), passes, path)
        ->Args({20, 1})
        ->Args({20, 0})
        ->ArgNames({"passes", "home"})
        ->Unit(benchmark::kMillisecond)
        ->Iterations(1);
  }
  return true;
}();

}  // namespace
}  // namespace gpumem::bench
