// The suballocators' data structures on their own: coalescing_free_list (best fit, high-end split,
// coalescing within a chunk only), fixed_size_free_list, and the allocation table
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

/// The coalescing list's specification, written plainly: blocks by address, best fit by a scan.
class reference_free_list {
 public:
  free_block take(std::size_t size)
  {
    auto best = blocks_.end();
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
      if (it->second.size >= size &&
          (best == blocks_.end() || it->second.size < best->second.size)) {
        best = it;  // ascending addresses: the first of the smallest size wins
      }
    }
    if (best == blocks_.end()) { return {}; }
    auto b = best->second;
    if (b.size == size) {
      blocks_.erase(best);
      return b;
    }
    best->second.size -= size;  // cut from the high end
    return {b.ptr + b.size - size, size, b.chunk};
  }
  void insert(free_block b)
  {
    auto next = blocks_.lower_bound(b.ptr);
    if (next != blocks_.end() && next->first == b.end() && next->second.chunk == b.chunk) {
      b.size += next->second.size;
      next = blocks_.erase(next);
    }
    if (next != blocks_.begin()) {
      auto prev = std::prev(next);
      if (prev->second.end() == b.ptr && prev->second.chunk == b.chunk) {
        prev->second.size += b.size;
        return;
      }
    }
    blocks_.emplace(b.ptr, b);
  }
  [[nodiscard]] std::size_t blocks() const { return blocks_.size(); }

 private:
  std::map<char*, free_block> blocks_;
};

TEST(coalescing_free_list, HandsOutExactlyWhatTheReferenceDoes)
{
  std::mt19937_64 rng{11};
  coalescing_free_list list;
  reference_free_list ref;
  for (std::uint32_t c = 0; c < 3; ++c) {  // three adjacent chunks: no coalescing across them
    free_block const chunk{at(std::size_t{c} << 22), std::size_t{1} << 22, c};
    list.insert_chunk(chunk);
    ref.insert(chunk);
  }
  std::vector<free_block> out;
  for (int i = 0; i < 4000; ++i) {
    if (out.empty() || rng() % 5 < 3) {
      // Sizes over many classes: 256 B .. 1 MiB, log-uniform, some exact repeats.
      auto const size = std::size_t{256} << (rng() % 13) >> (rng() % 3);
      auto const want = std::max<std::size_t>(256, size / 256 * 256) + 256 * (rng() % 3);
      auto const got  = list.take(want);
      auto const exp  = ref.take(want);
      ASSERT_EQ(got.ptr, exp.ptr) << i;
      ASSERT_EQ(got.size, exp.size) << i;
      ASSERT_EQ(got.chunk, exp.chunk) << i;
      if (got.valid()) { out.push_back(got); }
    } else {
      auto const k = rng() % out.size();
      list.insert(out[k]);
      ref.insert(out[k]);
      out.erase(out.begin() + static_cast<long>(k));
    }
    ASSERT_EQ(list.stats().blocks, ref.blocks()) << i;
    if (i % 97 == 0) { ASSERT_NO_THROW(list.check_invariants()) << i; }
  }
  list.check_invariants();
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

TEST(allocation_table, MatchesAReferenceMapUnderRandomInsertAndErase)
{
  std::mt19937_64 rng{9};
  allocation_table map;
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
