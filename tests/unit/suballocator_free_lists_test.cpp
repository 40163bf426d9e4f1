// The suballocators' data structures on their own: coalescing_free_list (best fit, high-end split,
// coalescing within a chunk only), fixed_size_free_list, and the allocation table's block_map
// (open addressing with backward-shift deletion) against a std::map reference.
#include <gpumem/detail/allocation_table.hpp>
#include <gpumem/detail/coalescing_free_list.hpp>
#include <gpumem/detail/fixed_size_free_list.hpp>
#include <gpumem/error.hpp>

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace gpumem::detail {
namespace {

char* at(std::size_t offset)
{
  return reinterpret_cast<char*>(std::uintptr_t{1} << 40) + offset;
}

TEST(coalescing_free_list, BestFitSplitsFromTheHighEnd)
{
  coalescing_free_list list;
  list.insert({at(0), 4096, 0});
  list.insert({at(8192), 1024, 0});
  auto const b = list.take(512);
  EXPECT_EQ(b.ptr, at(8192 + 512));  // the 1 KiB block fits best; cut from its high end
  EXPECT_EQ(list.stats().free_bytes, 4096U + 512);
  EXPECT_FALSE(list.take(8192).valid());
  list.check_invariants();
}

TEST(coalescing_free_list, CoalescesNeighboursOfOneChunkOnly)
{
  coalescing_free_list list;
  list.insert({at(0), 256, 0});
  list.insert({at(512), 256, 0});
  list.insert({at(256), 256, 0});  // bridges both neighbours
  EXPECT_EQ(list.stats().blocks, 1U);
  EXPECT_EQ(list.stats().largest_bytes, 768U);
  list.insert({at(768), 256, 1});  // adjacent but another chunk: stays separate
  EXPECT_EQ(list.stats().blocks, 2U);
  list.check_invariants();
  coalescing_free_list copy{list};
  EXPECT_EQ(copy.stats().free_bytes, list.stats().free_bytes);
}

TEST(coalescing_free_list, RandomWalkKeepsInvariants)
{
  std::mt19937_64 rng{5};
  coalescing_free_list list;
  list.insert({at(0), 1 << 20, 0});
  std::vector<free_block> out;
  for (int i = 0; i < 5000; ++i) {
    if (out.empty() || rng() % 2 == 0) {
      auto b = list.take(256 * (1 + rng() % 64));
      if (b.valid()) { out.push_back(b); }
    } else {
      auto const k = rng() % out.size();
      list.insert(out[k]);
      out.erase(out.begin() + static_cast<long>(k));
    }
    ASSERT_NO_THROW(list.check_invariants()) << i;
  }
  for (auto const& b : out) { list.insert(b); }
  EXPECT_EQ(list.stats().blocks, 1U);
  EXPECT_EQ(list.stats().free_bytes, std::size_t{1} << 20);
}

TEST(fixed_size_free_list, CutsChunksAndDetectsDuplicates)
{
  fixed_size_free_list list{1024};
  list.insert_chunk({at(0), 4096, 0});
  EXPECT_EQ(list.stats().blocks, 4U);
  EXPECT_EQ(list.take(1).ptr, at(0));
  list.insert({at(1024), 1024, 0});  // already free: a broken invariant
  EXPECT_THROW(list.check_invariants(), gpumem::logic_error);
}

TEST(block_map, MatchesAReferenceMapUnderRandomInsertAndErase)
{
  std::mt19937_64 rng{9};
  block_map map;
  std::map<char*, std::size_t> ref;
  for (int i = 0; i < 20000; ++i) {
    char* key = at(256 * (rng() % 3000));
    if (ref.contains(key)) {
      auto const got = map.erase(key);
      ASSERT_TRUE(got.has_value());
      EXPECT_EQ(got->size, ref[key]);
      ref.erase(key);
    } else {
      map.insert({key, static_cast<std::size_t>(i), 0});
      ref[key] = static_cast<std::size_t>(i);
    }
  }
  EXPECT_FALSE(map.erase(at(256 * 5000)).has_value());
  std::size_t n = 0;
  map.for_each([&](free_block const& b) {
    ++n;
    EXPECT_EQ(ref.at(b.ptr), b.size);
  });
  EXPECT_EQ(n, ref.size());
}

}  // namespace
}  // namespace gpumem::detail
