// peak_recorder (src/replay): the layout it reports at the last new peak equals the layout computed
// directly at that moment, whatever mix of snapshots, marks and settling the sequence causes.
// Fuzzed against a model that keeps the blocks and chunks itself.
#include "../../src/replay/peak_recorder.hpp"

#include <support/memory_state_checks.hpp>

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace gpumem::trace {
namespace {

struct model {
  std::map<std::uintptr_t, std::size_t> blocks;
  std::map<std::uintptr_t, std::size_t> chunks;
  std::size_t held{};
  std::size_t live{};

  [[nodiscard]] memory_state layout() const
  {
    return lay_out({blocks.begin(), blocks.end()}, {chunks.begin(), chunks.end()}, held, live,
                   blocks.size());
  }
};

/// Random changes; a new peak with probability `peak_odds` per step. Chunks are 1 MiB at
/// distinct MiB addresses; blocks sit inside chunks at 4 KiB steps.
void fuzz(std::uint64_t seed, double peak_odds, int steps)
{
  std::mt19937_64 rng{seed};
  std::uniform_real_distribution<double> coin;
  model m;
  peak_recorder rec;
  memory_state expected;
  bool peaked = false;
  auto take   = [&](std::vector<address_range>& b, std::vector<address_range>& c) {
    b.assign(m.blocks.begin(), m.blocks.end());
    c.assign(m.chunks.begin(), m.chunks.end());
  };
  for (int i = 0; i < steps; ++i) {
    double const r = coin(rng);
    if (r < 0.05 || m.chunks.empty()) {  // a chunk comes
      std::uintptr_t const at = (1 + rng() % 64) << 20;
      if (m.chunks.emplace(at, std::size_t{1} << 20).second) {
        m.held += std::size_t{1} << 20;
        rec.chunk_added(at, std::size_t{1} << 20);
      }
    } else if (r < 0.07) {  // a chunk goes, with its blocks
      auto it = std::next(m.chunks.begin(), static_cast<long>(rng() % m.chunks.size()));
      for (auto b = m.blocks.lower_bound(it->first);
           b != m.blocks.end() && b->first < it->first + it->second;) {
        m.live -= b->second;
        rec.block_removed(*b);
        b = m.blocks.erase(b);
      }
      m.held -= it->second;
      rec.chunk_removed(it->first, it->second);
      m.chunks.erase(it);
    } else if (r < 0.55) {  // a block comes
      auto chunk = std::next(m.chunks.begin(), static_cast<long>(rng() % m.chunks.size()));
      std::uintptr_t const at = chunk->first + (rng() % 255) * 4096;
      std::size_t const size  = 1 + rng() % 4096;
      if (m.blocks.emplace(at, size).second) {
        m.live += size;
        if (rec.logging()) { rec.block_added({at, size}); }
      }
    } else if (!m.blocks.empty()) {  // a block goes
      auto it = std::next(m.blocks.begin(), static_cast<long>(rng() % m.blocks.size()));
      m.live -= it->second;
      if (rec.logging()) { rec.block_removed(*it); }
      m.blocks.erase(it);
    }
    if (coin(rng) < peak_odds) {
      rec.new_peak({m.held, m.live, m.blocks.size()}, m.blocks.size() + m.chunks.size(), take);
      expected = m.layout();
      peaked   = true;
    }
  }
  auto const got = rec.at_peak();
  if (!peaked) {
    EXPECT_FALSE(got.layout_known);
    return;
  }
  test::expect_same_state(got, expected, "seed " + std::to_string(seed));
}

TEST(PeakRecorder, NoPeakIsADefaultState)
{
  peak_recorder rec;
  rec.chunk_added(1 << 20, 1 << 20);
  EXPECT_FALSE(rec.logging());
  EXPECT_FALSE(rec.at_peak().layout_known);
}

TEST(PeakRecorder, TouchingMappingsAreOneRangeWhenJoined)
{
  // Two 1 MiB mappings side by side, one 256 KiB block at the start of the first: the free bytes
  // are one run of 1.75 MiB across the boundary when the chunks are virtual-memory mappings, and
  // two separate gaps (largest 1 MiB) when they are cudaMalloc chunks.
  constexpr std::uintptr_t at = 1 << 24;
  constexpr std::size_t mib   = 1 << 20;
  for (bool join : {false, true}) {
    peak_recorder rec;
    rec.join_adjacent_chunks(join);
    rec.new_peak({2 * mib, mib / 4, 1}, 8, [&](auto& blocks, auto& chunks) {
      blocks.push_back({at, mib / 4});
      chunks.push_back({at, mib});
      chunks.push_back({at + mib, mib});
    });
    auto const s = rec.at_peak();
    EXPECT_EQ(s.free_bytes, 2 * mib - mib / 4);
    EXPECT_EQ(s.largest_free_bytes, join ? 2 * mib - mib / 4 : mib) << "join " << join;
  }
  EXPECT_EQ(join_adjacent({{0, 10}, {10, 5}, {20, 1}}),
            (std::vector<address_range>{{0, 15}, {20, 1}}));
}

TEST(PeakRecorder, PeakAtTheLastStepIsTheCurrentLayout)
{
  fuzz(1, 1.0, 2000);
}

TEST(PeakRecorder, FrequentPeaksMarkTheLog)
{
  for (std::uint64_t seed = 0; seed < 20; ++seed) { fuzz(seed, 0.3, 3000); }
}

TEST(PeakRecorder, RarePeaksSettleAndResnapshot)
{
  for (std::uint64_t seed = 100; seed < 120; ++seed) { fuzz(seed, 0.002, 20000); }
}

TEST(PeakRecorder, MixedOdds)
{
  for (std::uint64_t seed = 200; seed < 240; ++seed) {
    fuzz(seed, seed % 2 == 0 ? 0.02 : 0.08, 5000);
  }
}

}  // namespace
}  // namespace gpumem::trace
