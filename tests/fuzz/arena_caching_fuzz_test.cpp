// Seeded random walk over arena_memory_resource and caching_memory_resource on the host stand-in:
// random sizes, streams, cross-stream frees, pending work, completion, defragment / cache
// control and bad frees. After every step: the resource's invariants, no overlap among live
// blocks, and the stream rule (a block last freed on S behind unfinished work is handed to T != S
// only if T's later work waits for S).
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/arena_memory_resource.hpp>
#include <gpumem/mr/caching_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <vector>

namespace gpumem::test {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

struct freed_range {
  std::uintptr_t end;
  cudaStream_t stream;
  std::uint64_t position;  // enqueued(stream) at the free
};

class walk {
 public:
  explicit walk(std::uint64_t seed) : rng_{seed}
  {
    for (int i = 0; i < 3; ++i) { streams_.push_back(rt_.create_stream()); }
    streams_.push_back(cudaStream_t{});       // legacy default: a per-thread arena
    streams_.push_back(cudaStreamPerThread);  // per-thread default: another one
  }
  virtual ~walk() = default;

  /// Returns how often a block reached a stream while its free was still pending elsewhere.
  int run(int steps)
  {
    for (int i = 0; i < steps && !::testing::Test::HasFatalFailure(); ++i) {
      step();
      check();
    }
    for (auto const& [p, info] : std::map{live_}) { free_block(p, info.first, info.second); }
    check();
    return ordered_handoffs_;
  }

 protected:
  virtual mr::device_memory_resource& mr()   = 0;
  virtual void check()                       = 0;
  virtual void control(std::uint64_t choice) = 0;

  detail::host_runtime rt_{[] {
    detail::host_runtime_options o;
    o.backed         = false;
    o.capacity_bytes = std::size_t{1} << 30;
    return o;
  }()};
  mr::cuda_memory_resource up_{rt_};
  std::mt19937_64 rng_;

 private:
  cudaStream_t pick_stream() { return streams_[rng_() % streams_.size()]; }

  void step()
  {
    auto const r = rng_() % 100;
    if (r < 45 && live_.size() < 64) { return allocate(); }
    if (r < 85 && !live_.empty()) { return free_random(); }
    if (r < 92) { return rt_.enqueue(pick_stream()); }
    if (r < 97) { return rt_.complete(pick_stream()); }
    control(rng_());
  }

  void allocate()
  {
    auto const shift = rng_() % 24;  // 1 B .. 16 MiB, log-uniform
    auto const bytes = (std::size_t{1} << shift) + rng_() % (std::size_t{1} << shift);
    auto const s     = pick_stream();
    void* p{};
    try {
      p = mr().allocate(bytes, s);
    } catch (gpumem::out_of_memory const&) {
      return;
    }
    auto const a = reinterpret_cast<std::uintptr_t>(p);
    auto it      = live_.upper_bound(p);
    ASSERT_TRUE(it == live_.end() || a + bytes <= reinterpret_cast<std::uintptr_t>(it->first));
    if (it != live_.begin()) {
      --it;
      ASSERT_LE(reinterpret_cast<std::uintptr_t>(it->first) + it->second.first, a) << "overlap";
    }
    check_order(a, a + bytes, s);
    live_.emplace(p, std::pair{bytes, s});
  }

  /// Any earlier free overlapping [a, e) on another stream with unfinished work must order s.
  void check_order(std::uintptr_t a, std::uintptr_t e, cudaStream_t s)
  {
    bool pending = false;
    for (auto it = freed_.begin(); it != freed_.end();) {
      bool const overlaps = it->first < e && a < it->second.end;
      if (overlaps && it->second.stream != s &&
          rt_.completed(it->second.stream) < it->second.position) {
        pending = true;
      }
      it = overlaps ? freed_.erase(it) : std::next(it);
    }
    if (!pending) { return; }
    ++ordered_handoffs_;
    rt_.enqueue(s);
    rt_.complete(s);
    EXPECT_LT(rt_.completed(s), rt_.enqueued(s)) << "block reached a stream before the free";
  }

  void free_random()
  {
    auto it      = std::next(live_.begin(), static_cast<long>(rng_() % live_.size()));
    auto const s = rng_() % 4 == 0 ? pick_stream() : it->second.second;  // sometimes another one
    free_block(it->first, it->second.first, s);
  }

  void free_block(void* p, std::size_t bytes, cudaStream_t s)
  {
    mr().deallocate(p, bytes, s);
    auto const a = reinterpret_cast<std::uintptr_t>(p);
    freed_[a]    = {a + bytes, s, rt_.enqueued(s)};
    live_.erase(p);
  }

  std::vector<cudaStream_t> streams_;
  std::map<void*, std::pair<std::size_t, cudaStream_t>> live_;
  std::map<std::uintptr_t, freed_range> freed_;
  int ordered_handoffs_{};
};

class arena_walk final : public walk {
 public:
  using walk::walk;

 private:
  mr::device_memory_resource& mr() override { return mr_; }
  void check() override { mr_.check_invariants(); }
  void control(std::uint64_t choice) override
  {
    if (choice % 2 == 0) { return mr_.defragment(); }
    ::testing::internal::CaptureStderr();
    int local{};
    mr_.deallocate(&local, 256, cuda_stream_view{});  // bad input: rejected, never applied
    (void)::testing::internal::GetCapturedStderr();
  }
  mr::arena_memory_resource<mr::cuda_memory_resource> mr_{&up_, 64 * MiB, false, rt_};
};

class caching_walk final : public walk {
 public:
  using walk::walk;

 private:
  mr::device_memory_resource& mr() override { return mr_; }
  void check() override { mr_.check_invariants(); }
  void control(std::uint64_t choice) override
  {
    switch (choice % 3) {
      case 0:
        return mr_.free_all_cached();
      case 1:
        return mr_.set_max_cached_bytes(choice % (16 * MiB));
      default: {
        ::testing::internal::CaptureStderr();
        int local{};
        mr_.deallocate(&local, 256, cuda_stream_view{});
        (void)::testing::internal::GetCapturedStderr();
      }
    }
  }
  mr::caching_memory_resource mr_{&up_, {}, rt_};
};

TEST(arena_caching_fuzz, ArenaRandomWalksKeepInvariantsAndStreamOrder)
{
  int handoffs = 0;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE(seed);
    handoffs += arena_walk{seed}.run(1500);
  }
  EXPECT_GT(handoffs, 0) << "the walk never handed a pending block to another stream";
}

TEST(arena_caching_fuzz, CachingRandomWalksKeepInvariantsAndStreamOrder)
{
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE(seed);
    caching_walk{seed}.run(1500);
  }
}

}  // namespace
}  // namespace gpumem::test
