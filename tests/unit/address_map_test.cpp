// detail::address_map<uint32_t> (the free list's start/end indexes) against a std::map reference
// under random insert / erase / assign / find, across growth and clustered keys; and
// detail::spin_mutex (mutual exclusion under contention, try_lock).
#include <gpumem/detail/address_map.hpp>
#include <gpumem/detail/spin_mutex.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace gpumem::detail {
namespace {

using index_map              = address_map<std::uint32_t>;
constexpr std::uint32_t none = UINT32_MAX;

char* key_at(std::uint64_t i)
{
  return reinterpret_cast<char*>((std::uint64_t{1} << 40) + i * 256);
}

void expect_same(index_map const& m, std::map<char*, std::uint32_t> const& ref,
                 std::uint64_t key_space)
{
  ASSERT_EQ(m.size(), ref.size());
  for (std::uint64_t i = 0; i < key_space; ++i) {
    auto const it = ref.find(key_at(i));
    EXPECT_EQ(m.find_or(key_at(i), none), it == ref.end() ? none : it->second) << i;
  }
}

TEST(address_map, EmptyFindsNothing)
{
  index_map m;
  EXPECT_EQ(m.find_or(key_at(1), none), none);
  EXPECT_FALSE(m.erase(key_at(1)));
  m.insert(key_at(1), 5);
  EXPECT_EQ(m.find_or(key_at(1), none), 5U);
  m.clear();
  EXPECT_EQ(m.find_or(key_at(1), none), none);
  EXPECT_EQ(m.size(), 0U);
}

/// Keys from a small space (so probe runs collide and wrap), every operation, checked in full.
TEST(address_map, MatchesAReferenceMapUnderRandomOperations)
{
  constexpr std::uint64_t key_space = 3000;
  std::mt19937_64 rng{17};
  index_map m;
  std::map<char*, std::uint32_t> ref;
  for (int step = 0; step < 40000; ++step) {
    auto* const k = key_at(rng() % key_space);
    auto const v  = static_cast<std::uint32_t>(rng() % 1000);
    auto const op = rng() % 10;
    if (op < 5) {
      if (ref.count(k) == 0) {
        m.insert(k, v);
        ref[k] = v;
      }
    } else if (op < 8) {
      EXPECT_EQ(m.erase(k), ref.erase(k) == 1);
    } else if (ref.count(k) == 1) {
      m.assign(k, v);
      ref[k] = v;
    }
    if (step % 4000 == 0) { expect_same(m, ref, key_space); }
  }
  expect_same(m, ref, key_space);
}

TEST(address_map, ReserveThenInsertUncheckedDoesNotGrow)
{
  index_map m;
  m.reserve(1000);
  std::vector<char*> keys;
  for (std::uint64_t i = 0; i < 1000; ++i) { m.insert_unchecked(key_at(i * 4096), 1); }
  EXPECT_EQ(m.size(), 1000U);
  for (std::uint64_t i = 0; i < 1000; ++i) { EXPECT_EQ(m.find_or(key_at(i * 4096), none), 1U); }
}

TEST(spin_mutex, ExcludesAndTryLocks)
{
  spin_mutex mu;
  std::uint64_t counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        std::lock_guard lock{mu};
        ++counter;
      }
    });
  }
  for (auto& t : threads) { t.join(); }
  EXPECT_EQ(counter, 80000U);
  ASSERT_TRUE(mu.try_lock());
  EXPECT_FALSE(mu.try_lock());
  mu.unlock();
}

}  // namespace
}  // namespace gpumem::detail
