// Seeded random walk over thread_cache_resource_adaptor in front of a pool, on the host stand-in,
// with several threads: allocations and frees on any thread (frees by a thread other than the
// allocating one included), on ordinary, legacy and per-thread default streams, trims, threads
// that exit (and are replaced) while their blocks are live. The test's threads run one step at a
// time, so after every step the state is quiescent and checked: the adaptor's and the pool's
// invariants, bytes cached == the sum over the caches <= the cap, cached blocks disjoint from each
// other and from live blocks, live blocks disjoint and intact, and the stream rule (memory reused
// on a stream other than the one that freed it, while that stream's work is unfinished, must find
// new work on the reusing stream waiting). GPUMEM_FUZZ_STEPS sets the length (default 1500),
// GPUMEM_FUZZ_SEEDS the seeds (support/fuzz_settings.hpp).
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/thread_cache_resource_adaptor.hpp>

#include <support/disjoint_blocks.hpp>
#include <support/fuzz_settings.hpp>

#include <gtest/gtest.h>

#include <array>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

namespace gpumem::test {
namespace {

using pool_t  = mr::pool_memory_resource<mr::cuda_memory_resource>;
using cache_t = mr::thread_cache_resource_adaptor<pool_t>;

constexpr int default_steps = 1500;
int steps()
{
  return fuzz_steps(default_steps);
}

/// A thread that runs one job at a time for the test, which waits for it.
class actor {
 public:
  actor() : thread_{[this] { loop(); }} {}
  actor(actor const&)            = delete;
  actor& operator=(actor const&) = delete;
  ~actor()
  {
    run({});
    thread_.join();
  }
  /// Runs `job` on this thread and waits; an empty job ends the thread.
  void run(std::function<void()> job)
  {
    std::unique_lock lock{mutex_};
    job_     = std::move(job);
    pending_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return !pending_; });
  }

 private:
  void loop()
  {
    for (bool more = true; more;) {
      std::unique_lock lock{mutex_};
      cv_.wait(lock, [this] { return pending_; });
      more = static_cast<bool>(job_);
      if (more) { job_(); }
      pending_ = false;
      cv_.notify_all();
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool pending_{};
  std::thread thread_;
};

/// A stream as the device sees it: per-thread default streams belong to one actor.
struct stream_id {
  cudaStream_t handle{};
  int owner{-1};  // the actor whose cudaStreamPerThread this is; -1 for other streams
  friend bool operator==(stream_id const&, stream_id const&) = default;
};
struct live_block {
  std::size_t bytes;
  stream_id stream;
  unsigned char tag;
};
struct freed_range {
  std::size_t bytes;
  stream_id stream;
  std::uint64_t position;  // the freeing stream's enqueued position at the free
};

class walker {
 public:
  explicit walker(std::uint64_t seed) : rng_{seed}
  {
    for (auto& a : actors_) { a = std::make_unique<actor>(); }
    shared_ = {rt_.create_stream(), rt_.create_stream(), cudaStream_t{}};
  }

  void run(int n)
  {
    for (int step = 0; step < n && !::testing::Test::HasFatalFailure(); ++step) {
      auto const op = rng_() % 20;
      if (op < 8 || live_.empty()) {
        allocate(pick_actor());
      } else if (op < 14) {
        free_one(pick_actor());
      } else if (op < 18) {
        on_stream(pick_stream(pick_actor()), [&](cudaStream_t s) { rt_.enqueue(s); });
      } else if (op == 18) {
        on_stream(pick_stream(pick_actor()), [&](cudaStream_t s) { rt_.complete(s); });
      } else {
        rare_event(pick_actor());
      }
      check(step);
    }
    while (!live_.empty()) { free_one(pick_actor()); }
    if (fuzz_reach_checked(default_steps)) {  // the walk reached the paths it is meant to test
      auto const st = cache_->stats();
      EXPECT_GT(st.hits, 0U);
      EXPECT_GT(st.remote_frees, 0U);
      EXPECT_GT(st.flushed, 0U);
    }
    for (auto& a : actors_) { a.reset(); }
    cache_->trim();
    EXPECT_EQ(pool_used(), 0U) << "every block went back to the pool";
    EXPECT_EQ(cache_->bad_deallocations(), 0U);
  }

 private:
  int pick_actor() { return static_cast<int>(rng_() % actors_.size()); }
  stream_id pick_stream(int who)
  {
    auto const k = rng_() % (shared_.size() + 1);
    return k < shared_.size() ? stream_id{shared_[k], -1} : stream_id{cudaStreamPerThread, who};
  }
  /// Runs f(handle) on the thread that can name the stream (any thread for a shared one).
  void on_stream(stream_id s, std::function<void(cudaStream_t)> const& f)
  {
    actors_[s.owner < 0 ? 0 : s.owner]->run([&] { f(s.handle); });
  }
  std::size_t pool_used() const { return pool_.pool_size() - pool_.get_free_stats().free_bytes; }

  void rare_event(int who)
  {
    switch (rng_() % 3) {
      case 0:  // the thread exits; its live blocks stay live
        exit_thread(who);
        break;
      case 1:
        actors_[who]->run([&] { cache_->trim(); });
        break;
      default:
        for (auto& a : actors_) {
          a->run([&] { rt_.complete(cudaStreamPerThread); });
        }
        rt_.complete_all();
    }
  }

  /// Replaces actor `who` by a new thread, after its per-thread stream's work is done (nobody
  /// can name that stream afterwards).
  void exit_thread(int who)
  {
    actors_[who]->run([&] { rt_.stream_synchronize(cudaStreamPerThread); });
    std::erase_if(freed_, [&](auto const& f) { return f.second.stream.owner == who; });
    actors_[who] = std::make_unique<actor>();
  }

  void allocate(int who)
  {
    auto const bytes = pick_size();
    auto const s     = pick_stream(who);
    char* p{};
    actors_[who]->run([&] {
      try {
        p = static_cast<char*>(cache_->allocate(bytes, s.handle));
      } catch (out_of_memory const&) {  // allowed: the pool is bounded
      }
    });
    if (p == nullptr) { return; }
    check_disjoint(p, bytes);
    check_ordered(p, bytes, s);
    auto const tag = static_cast<unsigned char>(rng_());
    p[0]           = static_cast<char>(tag);
    p[bytes - 1]   = static_cast<char>(tag);
    live_.emplace(p, live_block{bytes, s, tag});
  }

  /// Three requests in four are of a few sizes fixed for the walk (256 B to 128 KiB), as a
  /// program's are, so that a freed block is often asked for again (cache hits among remote frees
  /// and flushes); the rest are of any size from 256 B to about 3 MiB (the largest pass the cache).
  std::size_t pick_size()
  {
    auto any = [&](double largest_exp) {
      auto const exp = std::uniform_real_distribution<double>{8, largest_exp}(rng_);
      return static_cast<std::size_t>(std::exp2(exp));
    };
    if (palette_.empty()) {
      for (int k = 0; k < 6; ++k) { palette_.push_back(any(17)); }
    }
    return rng_() % 4 != 0 ? palette_[rng_() % palette_.size()] : any(21.5);
  }

  void free_one(int who)
  {
    auto it        = std::next(live_.begin(), static_cast<long>(rng_() % live_.size()));
    auto [p, info] = *it;
    EXPECT_EQ(static_cast<unsigned char>(p[0]), info.tag) << "allocation overwritten";
    EXPECT_EQ(static_cast<unsigned char>(p[info.bytes - 1]), info.tag) << "allocation overwritten";
    auto const s = rng_() % 4 == 0 ? pick_stream(who) : info.stream;
    // The caller's contract: work on the allocating stream is done before freeing elsewhere.
    if (!(s == info.stream)) {
      on_stream(info.stream, [&](cudaStream_t h) { rt_.stream_synchronize(h); });
    }
    on_stream(s, [&](cudaStream_t h) { freed_[p] = freed_range{info.bytes, s, rt_.enqueued(h)}; });
    live_.erase(it);
    // Freed by `who` on s; on a per-thread stream, by its owner.
    actors_[s.owner < 0 ? who : s.owner]->run([&] { cache_->deallocate(p, info.bytes, s.handle); });
  }

  void check_disjoint(char* p, std::size_t bytes) { assert_disjoint(live_, p, bytes); }

  /// Every earlier free overlapping [p, p+bytes) on another, unfinished stream must be waited for.
  void check_ordered(char* p, std::size_t bytes, stream_id s)
  {
    bool must_wait = false;
    for (auto it = freed_.begin(); it != freed_.end();) {
      std::uint64_t done = 0;
      on_stream(it->second.stream, [&](cudaStream_t h) { done = rt_.completed(h); });
      if (done >= it->second.position) {
        it = freed_.erase(it);
        continue;
      }
      must_wait |=
          it->first < p + bytes && p < it->first + it->second.bytes && !(it->second.stream == s);
      ++it;
    }
    if (!must_wait) { return; }
    bool waits = false;
    on_stream(s, [&](cudaStream_t h) {
      rt_.enqueue(h);
      rt_.complete(h);
      waits = rt_.completed(h) < rt_.enqueued(h);
    });
    ASSERT_TRUE(waits) << "memory reached a stream before its free";
  }

  void check(int step)
  {
    ASSERT_NO_THROW(cache_->check_invariants()) << "step " << step;
    ASSERT_NO_THROW(pool_.check_invariants()) << "step " << step;
    auto const st       = cache_->stats();
    std::size_t per_sum = 0;
    for (auto const& t : st.per_thread) { per_sum += t.bytes_cached; }
    ASSERT_EQ(st.bytes_cached, per_sum) << "step " << step;
    ASSERT_LE(st.bytes_cached, st.cap_bytes) << "step " << step;
    std::size_t cached = 0;
    for (auto [p, n] : cache_->cached_blocks()) {
      check_disjoint(static_cast<char*>(p), n);
      cached += n;
    }
    ASSERT_EQ(cached, st.bytes_cached) << "step " << step;
    ASSERT_GE(pool_used(), cached) << "every cached block is held from the pool";
  }

  std::mt19937_64 rng_;
  detail::host_runtime rt_{detail::host_runtime_options{.capacity_bytes = std::size_t{1} << 30}};
  mr::cuda_memory_resource cuda_{rt_};
  pool_t pool_{&cuda_, 1 << 20, 32 << 20, rt_};
  std::unique_ptr<cache_t> cache_ = std::make_unique<cache_t>(
      &pool_, mr::thread_cache_options{.thread_cap_bytes = 1 << 20, .pool_fraction = 0.25});
  std::array<std::unique_ptr<actor>, 3> actors_;
  std::vector<cudaStream_t> shared_;
  std::vector<std::size_t> palette_;  // the walk's usual sizes
  std::map<char*, live_block> live_;
  std::map<char*, freed_range> freed_;
};

class thread_cache_fuzz : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(thread_cache_fuzz, ThreadCacheOverPool)
{
  walker{GetParam()}.run(steps());
}

INSTANTIATE_TEST_SUITE_P(seeds, thread_cache_fuzz,
                         ::testing::ValuesIn(fuzz_seeds({1, 2, 20261124})));

}  // namespace
}  // namespace gpumem::test
