// bench/support/workloads.hpp — workload pieces the microbenchmarks share: log-uniform sizes and
// the threads workload's ring of live blocks.
#pragma once

#include <gpumem/mr/device_memory_resource.hpp>

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace gpumem::bench {

/// `count` sizes log-uniform in [lo, hi], reproducible from `seed`.
inline std::vector<std::size_t> log_uniform_sizes(std::size_t count, std::size_t lo, std::size_t hi,
                                                  std::uint64_t seed)
{
  std::mt19937_64 rng{seed};
  std::uniform_real_distribution<double> e{std::log2(double(lo)), std::log2(double(hi))};
  std::vector<std::size_t> sizes(count);
  for (auto& s : sizes) { s = static_cast<std::size_t>(std::exp2(e(rng))); }
  return sizes;
}

/// One thread of the threads workload on `mr` and stream `s`: a ring of 64 live blocks of sizes
/// 256 B .. 64 KiB; each iteration frees the oldest block and allocates a new one.
inline void ring_of_live_blocks(benchmark::State& state, mr::device_memory_resource& mr,
                                cudaStream_t s)
{
  constexpr std::size_t KiB = 1024;
  auto const sizes          = log_uniform_sizes(4096, 256, 64 * KiB, 100 + state.thread_index());
  std::vector<std::pair<void*, std::size_t>> ring(64, {nullptr, 0});
  std::size_t i = 0;
  for (auto _ : state) {
    auto& slot = ring[i % 64];
    if (slot.first != nullptr) { mr.deallocate(slot.first, slot.second, s); }
    auto const n = sizes[i % sizes.size()];
    slot         = {mr.allocate(n, s), n};
    ++i;
  }
  for (auto [p, n] : ring) {
    if (p != nullptr) { mr.deallocate(p, n, s); }
  }
  state.SetItemsProcessed(state.iterations() * 2);  // an allocate and a free per iteration
}

}  // namespace gpumem::bench
