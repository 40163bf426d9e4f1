// The stream-ordered core's policy types on their own, each against a stand-in for what the core
// gives it: the two growth strategies (chunk_growth, in_place_growth) and the same-size steal of
// fixed_size_free_list. The placements are tested through the resources that use them.
#include <gpumem/detail/chunk_growth.hpp>
#include <gpumem/detail/coalescing_free_list.hpp>
#include <gpumem/detail/fixed_size_free_list.hpp>
#include <gpumem/detail/in_place_growth.hpp>
#include <gpumem/detail/spin_mutex.hpp>
#include <gpumem/error.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace gpumem::detail {
namespace {

char* at(std::size_t offset)
{
  return reinterpret_cast<char*>(std::uintptr_t{1} << 40) + offset;
}

/// The core's idle list: a mutex and a list.
struct idle_list {
  spin_mutex mutex;
  coalescing_free_list list;
};

/// A placement that says whether idle blocks may be in use, and counts settlements.
struct placement_stub {
  bool in_use{false};
  int settled{0};
  bool idle_in_use() const noexcept { return in_use; }
  void settle_idle() { ++settled; }
};

/// What chunk_growth asks of the resource: chunks at consecutive simulated addresses.
struct chunk_source {
  std::size_t next{0};
  bool fail{false};
  std::vector<free_block> returned;
  free_block allocate_chunk(std::size_t size)
  {
    if (fail) { throw out_of_memory{"chunk_source: no memory"}; }
    free_block chunk{at(next), size, 0};
    next += size + 4096;  // a gap: chunks are never adjacent
    return chunk;
  }
  void deallocate_chunk(free_block chunk) noexcept { returned.push_back(chunk); }
  [[nodiscard]] coalescing_free_list empty_list() const { return {}; }
};

TEST(chunk_growth, EachGrowthIsAChunkTheRequestIsCutFromAndTheRestGoesIdle)
{
  chunk_growth growth;
  chunk_source source;
  idle_list idle;
  placement_stub placement;
  auto const a = growth.grow(source, idle, 1024, placement);
  EXPECT_EQ(a.size, 1024U);
  EXPECT_EQ(a.chunk, 0U);
  EXPECT_EQ(idle.list.stats().free_bytes, 0U);  // the chunk was the request's size
  auto const b = growth.grow(source, idle, 512, placement);
  EXPECT_EQ(b.chunk, 1U);  // blocks name their chunk
  growth.adopt({at(1 << 20), 8192, 0});
  ASSERT_EQ(growth.chunks().size(), 3U);
  for (std::uint32_t i = 0; i < 3; ++i) { EXPECT_EQ(growth.chunks()[i].chunk, i); }
  EXPECT_EQ(growth.bytes(), 1024U + 512 + 8192);
  EXPECT_EQ(placement.settled, 0);  // new memory: nothing to settle
  growth.check_invariants("test", source, {});
  growth.release(source);
  EXPECT_EQ(source.returned.size(), 3U);
  EXPECT_EQ(growth.bytes(), 0U);
  EXPECT_TRUE(growth.chunks().empty());
}

TEST(chunk_growth, AFailedGrowthCountsNothing)
{
  chunk_growth growth;
  chunk_source source;
  idle_list idle;
  placement_stub placement;
  source.fail = true;
  EXPECT_THROW(growth.grow(source, idle, 1024, placement), out_of_memory);
  EXPECT_EQ(growth.bytes(), 0U);
  EXPECT_TRUE(growth.chunks().empty());
  EXPECT_TRUE(idle.list.empty());
  growth.check_invariants("test", source, {});
}

/// What in_place_growth asks of the resource: backs `size` more at the end of what it backed.
struct backing_source {
  std::size_t backed{0};
  int oom_without_moving{0};                // growths with may_move == false that fail first
  std::vector<bool> calls;                  // may_move of each grow_in_place call
  mutable std::vector<free_block> checked;  // what check_backing was given
  free_block grow_in_place(coalescing_free_list& idle, std::size_t size, bool may_move)
  {
    calls.push_back(may_move);
    if (!may_move && oom_without_moving-- > 0) { throw out_of_memory{"backing_source: full"}; }
    idle.insert({at(backed), size, 0});
    backed += size;
    return idle.take(size);
  }
  [[nodiscard]] std::size_t backed_bytes() const noexcept { return backed; }
  void check_backing(std::vector<free_block> const& blocks) const { checked = blocks; }
};

TEST(in_place_growth, GrowsInPlaceAndThePoolSizeFollowsTheBacking)
{
  in_place_growth growth;
  backing_source source;
  idle_list idle;
  placement_stub placement;
  growth.register_range({at(0), std::size_t{1} << 30, 0});
  auto const a = growth.grow(source, idle, 4096, placement);
  EXPECT_EQ(a.size, 4096U);
  EXPECT_EQ(growth.bytes(), 4096U);
  EXPECT_EQ(source.calls, std::vector<bool>{true});  // idle blocks idle: may move memory
  EXPECT_EQ(placement.settled, 1);
  growth.check_invariants("test", source, {a});
  EXPECT_EQ(source.checked.size(), 1U);
  ASSERT_EQ(growth.chunks().size(), 1U);
  EXPECT_EQ(growth.chunks()[0].chunk, 0U);
}

TEST(in_place_growth, WhileIdleBlocksMayBeInUseItTakesNewMemoryFirst)
{
  in_place_growth growth;
  backing_source source;
  idle_list idle;
  placement_stub placement{.in_use = true};
  growth.register_range({at(0), std::size_t{1} << 30, 0});
  (void)growth.grow(source, idle, 4096, placement);
  EXPECT_EQ(source.calls, std::vector<bool>{false});
  EXPECT_EQ(placement.settled, 0);  // no synchronization
  source.oom_without_moving = 1;    // new memory alone is not enough: settle, then move
  (void)growth.grow(source, idle, 4096, placement);
  EXPECT_EQ(source.calls, (std::vector<bool>{false, false, true}));
  EXPECT_EQ(placement.settled, 1);
  EXPECT_EQ(growth.bytes(), 8192U);
}

TEST(in_place_growth, ABackingChangedOutsideTrackBreaksTheInvariant)
{
  in_place_growth growth;
  backing_source source;
  growth.register_range({at(0), std::size_t{1} << 30, 0});
  (void)growth.track(source, [&] { source.backed = 2 * 4096; });
  EXPECT_EQ(growth.bytes(), 2 * 4096U);
  growth.check_invariants("test", source, {});
  source.backed = 4096;  // unmapped behind the growth's back
  EXPECT_THROW(growth.check_invariants("test", source, {}), logic_error);
  EXPECT_THROW(growth.track(source, []() -> int { throw out_of_memory{"x"}; }), out_of_memory);
  EXPECT_EQ(growth.bytes(), 4096U);  // followed the backing although f threw
  growth.check_invariants("test", source, {});
}

TEST(same_size_steal, ADonorWithFewBlocksKeepsThemOtherwiseHalfComeAlong)
{
  fixed_size_free_list donor{256};
  donor.insert_chunk({at(0), 3 * 256, 0});
  same_size_steal taken{donor};
  EXPECT_TRUE(taken.donor_keeps(donor));  // 3 < min_donor_blocks
  donor.insert_chunk({at(4096), 5 * 256, 1});
  EXPECT_FALSE(taken.donor_keeps(donor));
  EXPECT_TRUE(donor.take(256).valid());  // the block asked for, 7 left
  taken.take_extra(donor);
  EXPECT_TRUE(taken.has_extra());
  EXPECT_EQ(donor.count(), 4U);  // 3 of 7 came along
  fixed_size_free_list mine{256};
  taken.deliver_to(mine);
  EXPECT_EQ(mine.count(), 3U);
  EXPECT_FALSE(taken.has_extra());
  mine.check_invariants();
  donor.check_invariants();
}

}  // namespace
}  // namespace gpumem::detail
