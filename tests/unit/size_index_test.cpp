// detail::size_index (the pool's best-fit B+ tree) against a std::set reference: lower_bound,
// find, erase, rekey, largest and order under random operations, with check_invariants() after
// every step; plus shapes that stress splits, merges and a tall tree's collapse.
#include <gpumem/detail/size_index.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace gpumem::detail {
namespace {

char* addr(std::uint64_t i)
{
  return reinterpret_cast<char*>((std::uint64_t{1} << 40) + i * 256);
}

using key = std::pair<std::size_t, char*>;

/// The index and a plain ordered set of the same keys (with their values), checked together.
struct model {
  size_index tree;
  std::map<key, std::uint32_t> ref;

  void insert(std::size_t s, char* p, std::uint32_t v)
  {
    tree.insert({s, p, v});
    ref.emplace(key{s, p}, v);
  }
  void expect_lower_bound(std::size_t s) const
  {
    auto const c  = tree.lower_bound(s);
    auto const it = ref.lower_bound(key{s, nullptr});
    ASSERT_EQ(c.valid(), it != ref.end()) << "size " << s;
    if (!c.valid()) { return; }
    auto const e = tree.at(c);
    EXPECT_EQ(e.size, it->first.first);
    EXPECT_EQ(e.ptr, it->first.second);
    EXPECT_EQ(e.value, it->second);
  }
  void expect_same() const
  {
    tree.check_invariants();
    ASSERT_EQ(tree.size(), ref.size());
    auto it = ref.begin();
    tree.for_each([&](size_index::entry e) {
      ASSERT_NE(it, ref.end());
      EXPECT_EQ(key(e.size, e.ptr), it->first);
      EXPECT_EQ(e.value, it->second);
      ++it;
    });
    if (!ref.empty()) { EXPECT_EQ(tree.largest().ptr, ref.rbegin()->first.second); }
  }
};

TEST(size_index, EmptyAndSingle)
{
  model m;
  EXPECT_FALSE(m.tree.lower_bound(1).valid());
  m.insert(512, addr(1), 7);
  m.expect_lower_bound(256);
  m.expect_lower_bound(512);
  m.expect_lower_bound(768);
  auto c = m.tree.find(512, addr(1));
  ASSERT_TRUE(c.valid());
  m.tree.erase(c);
  m.ref.clear();
  m.expect_same();
  EXPECT_TRUE(m.tree.empty());
}

TEST(size_index, EqualSizesComeOutByAddress)
{
  model m;
  for (std::uint64_t i = 0; i < 500; ++i) { m.insert(4096, addr((i * 7919) % 1000), 0); }
  m.expect_same();
  for (int i = 0; i < 500; ++i) {
    auto c = m.tree.lower_bound(4096);
    ASSERT_TRUE(c.valid());
    EXPECT_EQ(m.tree.at(c).ptr, m.ref.begin()->first.second);
    m.tree.erase(c);
    m.ref.erase(m.ref.begin());
  }
  m.expect_same();
}

TEST(size_index, GrowsTallThenCollapses)
{
  model m;
  for (std::uint64_t i = 0; i < 20000; ++i) { m.insert(256 * (1 + i % 97), addr(i), i); }
  m.expect_same();
  std::mt19937_64 rng{3};
  while (!m.ref.empty()) {
    auto it = std::next(m.ref.begin(), static_cast<long>(rng() % m.ref.size()));
    auto c  = m.tree.find(it->first.first, it->first.second);
    ASSERT_TRUE(c.valid());
    m.tree.erase(c);
    m.ref.erase(it);
    if (m.ref.size() % 1000 == 0) { m.expect_same(); }
  }
  m.expect_same();
}

/// Random insert / lower_bound+erase / lower_bound+rekey (shrink, like a split) / find+rekey
/// (grow, like a coalesce) / clear, against the reference.
TEST(size_index, MatchesAReferenceUnderRandomOperations)
{
  std::mt19937_64 rng{11};
  model m;
  std::uint64_t next_addr = 0;
  for (int step = 0; step < 60000; ++step) {
    auto const op     = rng() % 1000;
    auto const big    = 1 + rng() % (step % 3 == 0 ? 8 : 4000);
    auto const s      = 256 * big;
    auto const growth = (step / 10000) % 2 == 0 ? 600U : 350U;  // the size swings up and down
    if (op < growth || m.ref.empty()) {
      m.insert(s, addr(next_addr++), static_cast<std::uint32_t>(step));
    } else if (op < growth + 250) {
      m.expect_lower_bound(s);
      auto c = m.tree.lower_bound(s);
      if (!c.valid()) { continue; }
      auto const e = m.tree.at(c);
      m.ref.erase(key{e.size, e.ptr});
      if (e.size > s && rng() % 2 == 0) {  // split: the remainder keeps its address
        m.tree.reserve();
        m.tree.rekey(c, e.size - s, e.ptr);
        m.ref.emplace(key{e.size - s, e.ptr}, e.value);
      } else {
        m.tree.erase(c);
      }
    } else if (op < 999) {
      auto it = std::next(m.ref.begin(), static_cast<long>(rng() % m.ref.size()));
      auto c  = m.tree.find(it->first.first, it->first.second);
      ASSERT_TRUE(c.valid());
      auto const v       = it->second;
      auto const grown   = it->first.first + s;
      char* const new_at = rng() % 2 == 0 ? it->first.second : addr(next_addr++);
      m.ref.erase(it);
      m.tree.reserve();
      m.tree.rekey(c, grown, new_at);
      m.ref.emplace(key{grown, new_at}, v);
    } else if (step % 16 == 0) {  // rarely: start over
      m.tree.clear();
      m.ref.clear();
    }
    if (step % 197 == 0) { m.expect_same(); }
  }
  m.expect_same();
}

TEST(size_index, CopiesAreIndependent)
{
  model m;
  for (std::uint64_t i = 0; i < 300; ++i) { m.insert(256 * (i % 13 + 1), addr(i), i); }
  size_index copy{m.tree};
  auto c = m.tree.lower_bound(256);
  m.tree.erase(c);
  EXPECT_EQ(copy.size(), 300U);
  copy.check_invariants();
  m.tree.check_invariants();
}

}  // namespace
}  // namespace gpumem::detail
