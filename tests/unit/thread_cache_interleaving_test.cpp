// thread_cache_resource_adaptor under fixed interleavings of remote frees, upstream reuse and
// thread exit. The upstream is scripted: it hands back the most recently freed block that fits
// (as a pool does) and runs a step of the scenario inside one chosen upstream call, so that
// another thread's action lands exactly between two steps of the cache's slow path. Each
// scenario is one that a 16-thread stress run hits only now and then.
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/thread_cache_resource_adaptor.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace gpumem::test {
namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
cuda_stream_view const legacy{};  // the legacy default stream, shared by every thread

/// Host memory as a stream-ordered upstream that reuses the most recently freed block that fits,
/// with one-shot hooks run inside the next allocate (before it picks a block) or deallocate
/// (after it takes the block back). Counts frees of unknown pointers or with the wrong size.
class scripted_upstream final : public mr::device_memory_resource {
 public:
  scripted_upstream()                                    = default;
  scripted_upstream(scripted_upstream const&)            = delete;
  scripted_upstream& operator=(scripted_upstream const&) = delete;
  ~scripted_upstream() override
  {
    for (auto& [p, bytes] : free_) { std::free(p); }
    for (auto& [p, bytes] : live_) { std::free(p); }
  }

  void on_next_allocate(std::function<void()> f)
  {
    std::lock_guard lock{mutex_};
    before_allocate_ = std::move(f);
  }
  void on_next_deallocate(std::function<void()> f)
  {
    std::lock_guard lock{mutex_};
    after_deallocate_ = std::move(f);
  }
  [[nodiscard]] std::size_t live_blocks() const
  {
    std::lock_guard lock{mutex_};
    return live_.size();
  }
  [[nodiscard]] std::size_t bad_frees() const
  {
    std::lock_guard lock{mutex_};
    return bad_;
  }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view) override
  {
    run(before_allocate_);
    std::lock_guard lock{mutex_};
    for (auto it = free_.rbegin(); it != free_.rend(); ++it) {
      if (it->second >= bytes) {
        auto const block = *it;
        free_.erase(std::next(it).base());
        live_.emplace(block.first, block.second);
        return block.first;
      }
    }
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    live_.emplace(p, bytes);
    return p;
  }

  void do_deallocate(void* p, std::size_t bytes, cuda_stream_view) noexcept override
  {
    {
      std::lock_guard lock{mutex_};
      auto it = live_.find(p);
      if (it == live_.end() || it->second < bytes) {
        ++bad_;
      } else {
        free_.emplace_back(p, it->second);
        live_.erase(it);
      }
    }
    run(after_deallocate_);
  }

  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override
  {
    return this == &other;
  }

  void run(std::function<void()>& hook)
  {
    std::function<void()> f;
    {
      std::lock_guard lock{mutex_};
      f = std::exchange(hook, {});
    }
    if (f) { f(); }
  }

  mutable std::mutex mutex_;
  std::map<void*, std::size_t> live_;                // pointer -> size of the block handed out
  std::vector<std::pair<void*, std::size_t>> free_;  // freed blocks, the newest last
  std::function<void()> before_allocate_;
  std::function<void()> after_deallocate_;
  std::size_t bad_{};
};

using cache_t = mr::thread_cache_resource_adaptor<mr::device_memory_resource>;

/// A thread that runs the steps it is given, one at a time, and waits for each to finish.
class worker {
 public:
  worker()
      : thread_{[this] {
          for (;;) {
            std::packaged_task<void()> step;
            {
              std::unique_lock lock{mutex_};
              ready_.wait(lock, [&] { return !steps_.empty(); });
              step = std::move(steps_.front());
              steps_.erase(steps_.begin());
            }
            if (!step.valid()) { return; }
            step();
          }
        }}
  {
  }
  worker(worker const&)            = delete;
  worker& operator=(worker const&) = delete;
  ~worker()
  {
    post(std::packaged_task<void()>{});
    thread_.join();
  }

  template <class F>
  auto run(F f)
  {
    std::packaged_task<decltype(f())()> task{std::move(f)};
    auto done = task.get_future();
    post(std::packaged_task<void()>{[&task] { task(); }});
    return done.get();
  }

 private:
  void post(std::packaged_task<void()> step)
  {
    {
      std::lock_guard lock{mutex_};
      steps_.push_back(std::move(step));
    }
    ready_.notify_one();
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<std::packaged_task<void()>> steps_;  // an invalid task ends the thread
  std::thread thread_;
};

/// Thread O exits while it owns a live block p and holds a cached one. While O's exit flushes
/// the cached block upstream, thread T frees p on its per-thread stream (so p goes straight
/// upstream and O only gets a notice), and thread X allocates and gets p from upstream. O's exit
/// must orphan only what it still owns: X's record of p must stay X's.
TEST(thread_cache_interleaving, AThreadExitLeavesABlockItWasToldItLostToAnotherThread)
{
  scripted_upstream up;
  {
    cache_t cache{&up};
    worker x;
    x.run([&] { cache.deallocate(cache.allocate(256, legacy), 256, legacy); });  // X has a cache
    void* p = nullptr;
    std::thread{[&] {
      p       = cache.allocate(8 * KiB, legacy);
      void* q = cache.allocate(16 * KiB, legacy);
      cache.deallocate(q, 16 * KiB, legacy);  // cached: O's exit flushes it upstream
      up.on_next_deallocate([&] {             // inside O's exit, after it took in its notices
        std::thread{[&] { cache.deallocate(p, 8 * KiB, cudaStreamPerThread); }}.join();
        EXPECT_EQ(x.run([&] { return cache.allocate(6 * KiB, legacy); }), p) << "the script";
      });
    }}.join();
    EXPECT_NO_THROW(cache.check_invariants());
    std::thread{[&] { cache.deallocate(p, 6 * KiB, legacy); }}.join();  // X's, freed elsewhere
    EXPECT_EQ(cache.bad_deallocations(), 0U) << "a correct free reported as a wrong size";
    x.run([&] { cache.trim(); });
    EXPECT_NO_THROW(cache.check_invariants());
  }
  EXPECT_EQ(up.bad_frees(), 0U);
  EXPECT_EQ(up.live_blocks(), 0U) << "every block is back upstream";
}

/// Thread O frees nothing itself: thread T frees O's block p on its per-thread stream while O is
/// inside its own miss, after O took in its notices and before the upstream answers, and the
/// upstream then hands O the same p. O must not keep two records of p, and the notice about the
/// old p must not erase the new one.
TEST(thread_cache_interleaving, AMissThatGetsBackABlockItWasToldItLostKeepsOneRecord)
{
  scripted_upstream up;
  {
    cache_t cache{&up};
    worker o;
    void* p = o.run([&] { return cache.allocate(8 * KiB, legacy); });
    up.on_next_allocate(
        [&] { std::thread{[&] { cache.deallocate(p, 8 * KiB, cudaStreamPerThread); }}.join(); });
    EXPECT_EQ(o.run([&] { return cache.allocate(4 * KiB, legacy); }), p) << "the script";
    EXPECT_NO_THROW(cache.check_invariants());
    o.run([&] { cache.deallocate(p, 4 * KiB, legacy); });
    EXPECT_NO_THROW(cache.check_invariants());
    EXPECT_EQ(o.run([&] { return cache.allocate(4 * KiB, legacy); }), p) << "cached, then reused";
    o.run([&] { cache.deallocate(p, 4 * KiB, legacy); });
    EXPECT_EQ(cache.bad_deallocations(), 0U);
    EXPECT_EQ(cache.stats().hits, 1U);
  }
  EXPECT_EQ(up.bad_frees(), 0U);
  EXPECT_EQ(up.live_blocks(), 0U);
}

/// Thread O exits while thread T's free of O's live block p (on a stream of T's own, so the block
/// is posted to O) is in flight: the notice lands after O took in the others and p goes upstream
/// once.
TEST(thread_cache_interleaving, ARemoteFreeDuringThreadExitReleasesTheBlockOnce)
{
  scripted_upstream up;
  {
    cache_t cache{&up};
    void* p = nullptr;
    std::thread{[&] {
      p       = cache.allocate(8 * KiB, legacy);
      void* q = cache.allocate(16 * KiB, legacy);
      cache.deallocate(q, 16 * KiB, legacy);
      up.on_next_deallocate(
          [&] { std::thread{[&] { cache.deallocate(p, 8 * KiB, legacy); }}.join(); });
    }}.join();
    EXPECT_NO_THROW(cache.check_invariants());
    EXPECT_EQ(cache.stats().remote_frees, 1U);
    EXPECT_EQ(up.live_blocks(), 0U) << "the posted block went upstream when its owner exited";
  }
  EXPECT_EQ(up.bad_frees(), 0U);
}

}  // namespace
}  // namespace gpumem::test
