// The replayer's containers: pointer_map against std::unordered_map under random churn (growth,
// clustered keys, backward-shift deletion), compact_trace round trips, metered_runtime's ledger.
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/trace/compact_trace.hpp>
#include <gpumem/runtime/metered_runtime.hpp>
#include <gpumem/trace/pointer_map.hpp>

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

namespace gpumem::trace {
namespace {

TEST(PointerMap, MatchesUnorderedMapUnderChurn)
{
  pointer_map map{16};
  std::unordered_map<std::uint64_t, std::size_t> ref;
  std::mt19937_64 rng{3};
  for (int i = 0; i < 200000; ++i) {
    // Clustered keys (aligned pointers in a small range) make long probe runs.
    std::uint64_t const key = 0x7f0000000000ULL + (rng() % 4096) * 256;
    if (rng() % 3 != 0) {
      if (ref.count(key) == 0) {
        map.insert(key, {nullptr, static_cast<std::size_t>(i), nullptr});
        ref[key] = static_cast<std::size_t>(i);
      }
    } else {
      live_block out;
      bool const erased = map.erase(key, out);
      ASSERT_EQ(erased, ref.count(key) == 1) << i;
      if (erased) {
        ASSERT_EQ(out.size, ref[key]);
        ref.erase(key);
      }
    }
    ASSERT_EQ(map.size(), ref.size());
  }
  for (auto const& [k, v] : ref) {
    auto* b = map.find(k);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->size, v);
  }
  std::size_t seen = 0;
  map.for_each([&](std::uint64_t k, live_block const& b) {
    EXPECT_EQ(ref.at(k), b.size);
    ++seen;
  });
  EXPECT_EQ(seen, ref.size());
  EXPECT_EQ(map.find(1), nullptr);
}

TEST(CompactTrace, RoundTripsBeyondItsBuffer)
{
  compact_trace t;
  constexpr std::uint32_t n = 100000;  // several buffer spills
  for (std::uint32_t i = 0; i < n; ++i) {
    t.append({.size   = i * 3ULL,
              .slot   = i % 77,
              .line   = i + 2,
              .stream = 1,
              .thread = 2,
              .act    = i % 2 ? compact_event::free : compact_event::allocate});
  }
  t.finish();
  EXPECT_EQ(t.size(), n);
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<compact_event> chunk(999);
    std::uint32_t i = 0;
    for (auto k = t.read(chunk); k != 0; k = t.read(chunk)) {
      for (std::size_t j = 0; j < k; ++j, ++i) {
        ASSERT_EQ(chunk[j].size, i * 3ULL);
        ASSERT_EQ(chunk[j].line, i + 2);
        ASSERT_EQ(chunk[j].slot, i % 77);
      }
    }
    EXPECT_EQ(i, n);
    t.rewind();
  }
}

TEST(MeteredRuntime, CountsHeldBytesChunksAndPeak)
{
  detail::host_runtime rt{{.capacity_bytes = 1 << 20, .backed = false}};
  metered_runtime meter{rt};
  void* a = meter.allocate(detail::memory_kind::device, 4096);
  void* b = meter.allocate(detail::memory_kind::device, 1000);
  EXPECT_EQ(meter.held_bytes(), 5096U);
  auto chunks = meter.chunks();
  ASSERT_EQ(chunks.size(), 2U);
  EXPECT_LT(chunks[0].first, chunks[1].first);  // address-ordered
  meter.free(detail::memory_kind::device, a);
  EXPECT_EQ(meter.held_bytes(), 1000U);
  EXPECT_EQ(meter.peak_held_bytes(), 5096U);
  meter.reset_peak();
  EXPECT_EQ(meter.peak_held_bytes(), 1000U);
  meter.free(detail::memory_kind::device, b);
  EXPECT_EQ(meter.held_bytes(), 0U);
  EXPECT_EQ(rt.used_bytes(), 0U);
  EXPECT_STREQ(meter.name(), "host");
}

}  // namespace
}  // namespace gpumem::trace
