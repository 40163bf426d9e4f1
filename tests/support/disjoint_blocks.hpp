// tests/support/disjoint_blocks.hpp — the fuzz walks' check that a new block overlaps no live one.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <iterator>

namespace gpumem::test {

/// Fails the test (fatally for the caller's step) when [p, p + bytes) overlaps a block of `live`:
/// a map from each live block's address to a record with its `bytes`.
template <class LiveMap>
void assert_disjoint(LiveMap const& live, char* p, std::size_t bytes)
{
  auto next = live.lower_bound(p);
  if (next != live.end()) { ASSERT_LE(p + bytes, next->first) << "overlaps a live block"; }
  if (next != live.begin()) {
    auto prev = std::prev(next);
    ASSERT_LE(prev->first + prev->second.bytes, p) << "overlaps a live block";
  }
}

}  // namespace gpumem::test
