// Many threads allocate, write, verify and free through one arena_memory_resource and one
// caching_memory_resource (host stand-in, real host memory): own streams, the default streams,
// frees handed to other threads, defragment / cache control and invariant checks racing with
// them. Run under TSan in CI: two threads given the same bytes would race on them.
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/arena_memory_resource.hpp>
#include <gpumem/mr/caching_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <support/mailbox.hpp>

namespace gpumem::test {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr int threads     = 8;
constexpr int ops         = 1500;

struct block {
  void* ptr;
  std::size_t bytes;
  unsigned char tag;
};

using block_mailbox = mailbox<block>;

void fill(block const& b)
{
  std::memset(b.ptr, b.tag, std::min<std::size_t>(b.bytes, 4096));
}
bool intact(block const& b)
{
  auto const* p = static_cast<unsigned char const*>(b.ptr);
  for (std::size_t i = 0; i < std::min<std::size_t>(b.bytes, 4096); ++i) {
    if (p[i] != b.tag) { return false; }
  }
  return true;
}

cudaStream_t stream_of(int t, std::vector<cudaStream_t> const& own)
{
  if (t == 0) { return cudaStream_t{}; }
  if (t == 1) { return cudaStreamPerThread; }
  return own[static_cast<std::size_t>(t)];
}

void hammer(mr::device_memory_resource& mr, detail::host_runtime& rt,
            std::function<void(int)> const& control, std::function<void()> const& check)
{
  std::vector<cudaStream_t> own;
  for (int t = 0; t < threads; ++t) { own.push_back(rt.create_stream()); }
  block_mailbox box;
  std::atomic<int> bad{0};
  std::atomic<bool> done{false};
  std::thread checker{[&] {
    while (!done) { check(); }
  }};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 11);
      auto const s = stream_of(t, own);
      std::vector<block> mine;
      for (int i = 0; i < ops; ++i) {
        block got{};
        if (box.take(got)) {
          if (!intact(got)) { ++bad; }
          mr.deallocate(got.ptr, got.bytes, s);
        }
        if (mine.size() < 32 && rng() % 3 != 0) {
          std::size_t const n = rng() % 50 == 0 ? 2 * MiB + rng() % MiB : 256 + rng() % 65536;
          block b{mr.allocate(n, s), n, static_cast<unsigned char>(t * 31 + i)};
          fill(b);
          mine.push_back(b);
        } else if (!mine.empty()) {
          auto const k = rng() % mine.size();
          block b      = mine[k];
          mine.erase(mine.begin() + static_cast<long>(k));
          if (!intact(b)) { ++bad; }
          if (rng() % 4 == 0) {
            box.put(b);
          } else {
            mr.deallocate(b.ptr, b.bytes, s);
          }
        }
        if (rng() % 500 == 0) { control(t); }
      }
      for (auto const& b : mine) {
        if (!intact(b)) { ++bad; }
        mr.deallocate(b.ptr, b.bytes, s);
      }
    });
  }
  for (auto& th : pool) { th.join(); }
  done = true;
  checker.join();
  block left{};
  while (box.take(left)) { mr.deallocate(left.ptr, left.bytes, cudaStream_t{}); }
  EXPECT_EQ(bad, 0) << "a block was overwritten while live";
  check();
}

detail::host_runtime_options backed()
{
  detail::host_runtime_options o;
  o.auto_complete  = true;
  o.capacity_bytes = std::size_t{2} << 30;
  return o;
}

TEST(arena_caching_stress, ArenaUnderManyThreads)
{
  detail::host_runtime rt{backed()};
  mr::cuda_memory_resource up{rt};
  mr::arena_memory_resource<mr::cuda_memory_resource> mr{&up, 256 * MiB, false, rt};
  hammer(
      mr, rt, [&](int) { mr.defragment(); }, [&] { mr.check_invariants(); });
  EXPECT_EQ(mr.bad_deallocations(), 0U);
}

TEST(arena_caching_stress, CachingUnderManyThreads)
{
  detail::host_runtime rt{backed()};
  mr::cuda_memory_resource up{rt};
  mr::caching_memory_resource mr{&up, {}, rt};
  hammer(
      mr, rt,
      [&](int t) {
        if (t % 2 == 0) {
          mr.free_all_cached();
        } else {
          mr.set_max_cached_bytes(std::size_t{6} * MiB * static_cast<std::size_t>(t));
        }
      },
      [&] { mr.check_invariants(); });
  EXPECT_EQ(mr.bad_deallocations(), 0U);
  mr.free_all_cached();
  EXPECT_EQ(mr.cached_bytes().live, 0U);
}

}  // namespace
}  // namespace gpumem::test
