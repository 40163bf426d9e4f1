// Seeded random walk over vmm_pool_memory_resource with pause and resume among allocations, frees,
// trims and stream work, with injected failures (no pinned memory, failed copies, failed creates
// and maps during resume). Pauses discard, offload to pinned host memory or to a file, and wait
// for the device or for a random subset of the walk's streams. After every step: the pool's and the
// host model's invariants; every live block mapped when active; its first and last bytes intact
// across offload + resume (after a discard they are written again); allocations while paused
// refused with paused_error; and the listeners' account — bytes heard mapped minus bytes heard
// unmapped — equal to the memory mapped. Smoke-sized for CI; GPUMEM_FUZZ_STEPS for longer runs,
// GPUMEM_FUZZ_SEEDS for other seeds (support/fuzz_settings.hpp).
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <support/fuzz_settings.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <vector>

namespace gpumem::test {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

int steps()
{
  return fuzz_steps(1500);
}

struct live_block {
  std::size_t bytes;
  unsigned char tag;
};

class pause_walker {
 public:
  explicit pause_walker(std::uint64_t seed) : rng_{seed}
  {
    streams_ = {cudaStream_t{}, rt_.create_stream(), rt_.create_stream()};
    pool_.add_map_listener([this](vmm_mapping_event const& e) { heard_ += e.bytes; });
    pool_.add_unmap_listener([this](vmm_mapping_event const& e) { heard_ -= e.bytes; });
  }

  void run(int n)
  {
    for (int step = 0; step < n && !::testing::Test::HasFatalFailure(); ++step) {
      auto const op = rng_() % 20;
      if (op < 7) {
        allocate();
      } else if (op < 12) {
        free_one();
      } else if (op < 14) {
        rt_.enqueue(streams_[rng_() % streams_.size()]);
      } else if (op < 15) {
        rt_.complete_all();
      } else if (op < 17) {
        pause();
      } else if (op < 19) {
        resume();
      } else {
        (void)pool_.trim_to(rng_() % (64 * MiB));
      }
      check(step);
    }
    if (pool_.state() != pause_state::active) { ASSERT_TRUE(pool_.resume()); }
    while (!live_.empty()) { free_one(); }
    check(n);
    if (n >= 200) {  // the walk did pause and resume, not only refuse
      EXPECT_GT(pool_.stats().pauses, 10U);
      EXPECT_GT(pool_.stats().resumes, 10U);
    }
  }

 private:
  void allocate()
  {
    auto const exp   = std::uniform_real_distribution<double>{8, 24}(rng_);  // 256 B .. 16 MiB
    auto const bytes = static_cast<std::size_t>(std::exp2(exp));
    auto const s     = streams_[rng_() % streams_.size()];
    char* p{};
    try {
      p = static_cast<char*>(pool_.allocate(bytes, s));
    } catch (paused_error const&) {
      ASSERT_NE(pool_.state(), pause_state::active);
      return;
    } catch (out_of_memory const&) {
      return;
    }
    ASSERT_EQ(pool_.state(), pause_state::active) << "allocated while paused";
    auto const tag = static_cast<unsigned char>(rng_());
    live_[p]       = {bytes, tag};
    write(p, live_[p]);
  }
  static void write(char* p, live_block const& b)
  {
    p[0]           = static_cast<char>(b.tag);
    p[b.bytes - 1] = static_cast<char>(b.tag ^ 0xffU);
  }
  void free_one()
  {
    if (live_.empty()) { return; }
    auto it = live_.begin();
    std::advance(it, static_cast<long>(rng_() % live_.size()));
    pool_.deallocate(it->first, it->second.bytes, streams_[rng_() % streams_.size()]);
    live_.erase(it);
  }
  void pause()
  {
    constexpr pause_mode modes[] = {pause_mode::discard, pause_mode::offload,
                                    pause_mode::offload_to_file};
    auto const mode              = modes[rng_() % 3];
    auto const copies            = mode != pause_mode::discard;
    auto const fault             = rng_() % 6;
    if (copies && fault == 0) { rt_.fail_next_allocations(1); }
    if (copies && fault == 1) { rt_.fail_next_copies(1, rng_() % 8); }
    std::vector<cuda_stream_view> named;  // empty and unused: the device is synchronized
    auto const wait_for_named = rng_() % 2 == 0;
    for (auto s : streams_) {
      if (wait_for_named && rng_() % 2 == 0) { named.emplace_back(s); }
    }
    auto const was = pool_.state();
    try {
      auto const paused = wait_for_named ? pool_.pause(mode, named) : pool_.pause(mode);
      EXPECT_EQ(paused, was == pause_state::active);
      if (was == pause_state::active) { discarded_ = mode == pause_mode::discard; }
    } catch (out_of_memory const&) {
      EXPECT_EQ(pool_.state(), pause_state::active);
    } catch (cuda_error const&) {
      EXPECT_EQ(pool_.state(), pause_state::active);  // the host stand-in can always put it back
    }
    rt_.fail_next_allocations(0);
    rt_.fail_next_copies(0);
  }
  void resume()
  {
    auto const was   = pool_.state();
    auto const fault = rng_() % 6;
    if (fault == 0) { rt_.fail_next_allocations(1); }
    if (fault == 1) { rt_.fail_next_maps(1); }
    bool resumed = false;
    try {
      resumed = pool_.resume();
      EXPECT_EQ(resumed, was != pause_state::active);
    } catch (out_of_memory const&) {
      EXPECT_EQ(pool_.state(), was);
    } catch (cuda_error const&) {
      EXPECT_EQ(pool_.state(), was);
    }
    rt_.fail_next_allocations(0);
    rt_.fail_next_maps(0);
    if (resumed && discarded_) {  // the contents were given up: write the tags again
      for (auto& [p, b] : live_) { write(p, b); }
    }
  }
  void check(int step)
  {
    ASSERT_NO_THROW(pool_.check_invariants()) << "step " << step;
    ASSERT_NO_THROW(rt_.check_invariants()) << "step " << step;
    auto const s = pool_.stats();
    ASSERT_EQ(heard_, s.mapped_bytes) << "step " << step;
    ASSERT_EQ(s.listener_failures, 0U);
    if (pool_.state() != pause_state::active) {
      ASSERT_EQ(rt_.vmm_state().physical_bytes, 0U) << "step " << step;
      return;
    }
    ASSERT_EQ(s.paused_bytes, 0U);
    for (auto const& [p, b] : live_) {
      ASSERT_NO_THROW(rt_.vmm_check_mapped(p, b.bytes)) << "step " << step;
      ASSERT_EQ(static_cast<unsigned char>(p[0]), b.tag) << "step " << step;
      ASSERT_EQ(static_cast<unsigned char>(p[b.bytes - 1]), b.tag ^ 0xffU) << "step " << step;
    }
  }

  detail::host_runtime rt_{detail::host_runtime_options{.capacity_bytes = 160 * MiB}};
  mr::vmm_pool_memory_resource pool_{
      mr::vmm_pool_options{.reserve_bytes = 256 * MiB, .handle_bytes = 4 * MiB}, rt_};
  std::mt19937_64 rng_;
  std::vector<cudaStream_t> streams_;
  std::map<char*, live_block> live_;
  std::size_t heard_{};
  bool discarded_{};
};

class vmm_pool_pause_fuzz : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(vmm_pool_pause_fuzz, PauseResumeAmongAllocationsFreesAndTrims)
{
  pause_walker{GetParam()}.run(steps());
}

INSTANTIATE_TEST_SUITE_P(seeds, vmm_pool_pause_fuzz,
                         ::testing::ValuesIn(fuzz_seeds({1, 2, 20261126})));

}  // namespace
}  // namespace gpumem::test
