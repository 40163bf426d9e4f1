// tests/support/memory_state_checks.hpp — field-by-field comparison of two trace::memory_state
// (each mismatch names the field and `where`).
#pragma once

#include <gpumem/replay/replay.hpp>

#include <gtest/gtest.h>

#include <string>

namespace gpumem::test {

inline void expect_same_state(trace::memory_state const& a, trace::memory_state const& b,
                              std::string const& where)
{
  EXPECT_EQ(a.layout_known, b.layout_known) << where;
  EXPECT_EQ(a.held_bytes, b.held_bytes) << where;
  EXPECT_EQ(a.live_bytes, b.live_bytes) << where;
  EXPECT_EQ(a.live_blocks, b.live_blocks) << where;
  EXPECT_EQ(a.internal_bytes, b.internal_bytes) << where;
  EXPECT_EQ(a.free_bytes, b.free_bytes) << where;
  EXPECT_EQ(a.largest_free_bytes, b.largest_free_bytes) << where;
}

}  // namespace gpumem::test
