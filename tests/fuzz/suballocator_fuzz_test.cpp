// Seeded random walk over pool, fixed_size, binning and vmm_pool on the host stand-in. After every
// step: check_invariants(), live allocations disjoint and intact (first/last byte tags; for the
// virtual-memory pool also wholly mapped, and trim_to() now and then), and the stream
// rule: memory reused on a stream other than the one that freed it, while the freeing stream's
// work is unfinished, must find new work on the reusing stream waiting. Smoke-sized for CI; set
// GPUMEM_FUZZ_STEPS for longer runs and
// GPUMEM_FUZZ_SEEDS for other seeds (support/fuzz_settings.hpp; read by the tests only).
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/binning_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/fixed_size_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <support/disjoint_blocks.hpp>
#include <support/fuzz_settings.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <random>
#include <vector>

namespace gpumem::test {
namespace {

using upstream_t = mr::cuda_memory_resource;

struct live_block {
  std::size_t bytes;
  cudaStream_t stream;
  unsigned char tag;
};
struct freed_range {
  std::size_t bytes;
  cudaStream_t stream;
  std::uint64_t position;  // the freeing stream's enqueued position at the free
};

constexpr int default_steps = 2000;
int steps()
{
  return fuzz_steps(default_steps);
}

template <class Resource>
class walker {
 public:
  /// one_stream: every call on one stream, and now and then everything freed at once (the
  /// virtual-memory pool then takes its layout home at the next allocation).
  walker(detail::host_runtime& rt, Resource& res, std::size_t max_bytes, std::uint64_t seed,
         bool one_stream = false)
      : rt_{rt}, res_{res}, max_bytes_{max_bytes}, rng_{seed}, one_stream_{one_stream}
  {
    streams_ = {cudaStream_t{}, cudaStreamPerThread, rt.create_stream(), rt.create_stream()};
    if (one_stream) { streams_ = {rt.create_stream()}; }
  }

  void run(int n)
  {
    for (int step = 0; step < n && !::testing::Test::HasFatalFailure(); ++step) {
      auto const op = rng_() % 10;
      if (op < 4 || live_.empty()) {
        allocate();
      } else if (op < 7) {
        free_one();
      } else if (op < 9) {
        auto const s = pick_stream();
        rt_.enqueue(s);
        if (one_stream_ && rng_() % 2 == 0) { rt_.complete(s); }  // shorter work: growths may move
      } else if (one_stream_ && rng_() % 8 == 0) {  // the end of a job: all freed, synchronized
        while (!live_.empty()) { free_one(); }
        rt_.complete_all();
      } else if (rng_() % 4 == 0) {
        rt_.complete_all();
      } else {
        rt_.complete(pick_stream());
      }
      ASSERT_NO_THROW(res_.check_invariants()) << "step " << step;
      if constexpr (requires { res_.trim_to(0); }) { check_backing(); }
    }
    while (!live_.empty()) { free_one(); }
    rt_.complete_all();
    res_.check_invariants();
  }

 private:
  cudaStream_t pick_stream() { return streams_[rng_() % streams_.size()]; }

  /// Virtual-memory pools: every live block is mapped; now and then trim to a random size.
  void check_backing()
  {
    for (auto const& [p, info] : live_) { ASSERT_NO_THROW(rt_.vmm_check_mapped(p, info.bytes)); }
    if (rng_() % (one_stream_ ? 512 : 64) == 0) { res_.trim_to(rng_() % (4 * max_bytes_)); }
    ASSERT_NO_THROW(rt_.check_invariants());
  }

  void allocate()
  {
    auto const exp = std::uniform_real_distribution<double>{0, std::log2(double(max_bytes_))}(rng_);
    auto const bytes = std::max<std::size_t>(1, static_cast<std::size_t>(std::exp2(exp)));
    auto const s     = pick_stream();
    char* p{};
    try {
      p = static_cast<char*>(res_.allocate(bytes, s));
    } catch (out_of_memory const&) {
      return;  // allowed (bounded pools); the invariants are checked by the caller
    }
    check_disjoint(p, bytes);
    check_ordered(p, bytes, s);
    auto const tag = static_cast<unsigned char>(rng_());
    p[0]           = static_cast<char>(tag);
    p[bytes - 1]   = static_cast<char>(tag);
    live_.emplace(p, live_block{bytes, s, tag});
  }

  void free_one()
  {
    auto it        = std::next(live_.begin(), static_cast<long>(rng_() % live_.size()));
    auto [p, info] = *it;
    EXPECT_EQ(static_cast<unsigned char>(p[0]), info.tag) << "allocation overwritten";
    EXPECT_EQ(static_cast<unsigned char>(p[info.bytes - 1]), info.tag) << "allocation overwritten";
    auto const s = rng_() % 4 == 0 ? pick_stream() : info.stream;
    // The caller's contract: work on the allocating stream is done before freeing on another.
    if (s != info.stream) { rt_.stream_synchronize(info.stream); }
    freed_[p] = freed_range{info.bytes, s, rt_.enqueued(s)};
    live_.erase(it);
    res_.deallocate(p, info.bytes, s);
  }

  void check_disjoint(char* p, std::size_t bytes) { assert_disjoint(live_, p, bytes); }

  /// Every earlier free overlapping [p, p+bytes) on another, unfinished stream must be waited for.
  void check_ordered(char* p, std::size_t bytes, cudaStream_t s)
  {
    bool must_wait = false;
    for (auto it = freed_.begin(); it != freed_.end();) {
      auto const& f = it->second;
      if (rt_.completed(f.stream) >= f.position) {
        it = freed_.erase(it);  // that work is done: the range is safe everywhere
        continue;
      }
      bool const overlaps = it->first < p + bytes && p < it->first + f.bytes;
      must_wait |= overlaps && f.stream != s;
      ++it;
    }
    if (!must_wait) { return; }
    rt_.enqueue(s);
    rt_.complete(s);
    ASSERT_LT(rt_.completed(s), rt_.enqueued(s)) << "memory reached a stream before its free";
  }

  detail::host_runtime& rt_;
  Resource& res_;
  std::size_t max_bytes_;
  std::mt19937_64 rng_;
  std::vector<cudaStream_t> streams_;
  std::map<char*, live_block> live_;
  std::map<char*, freed_range> freed_;
  bool one_stream_;
};

class suballocator_fuzz : public ::testing::TestWithParam<std::uint64_t> {
 protected:
  detail::host_runtime rt_{detail::host_runtime_options{.capacity_bytes = std::size_t{1} << 30}};
  upstream_t upstream_{rt_};
};

TEST_P(suballocator_fuzz, Pool)
{
  mr::pool_memory_resource<upstream_t> pool{&upstream_, 1 << 20, 16 << 20, rt_};
  walker{rt_, pool, std::size_t{2} << 20, GetParam()}.run(steps());
}

TEST_P(suballocator_fuzz, FixedSize)
{
  mr::fixed_size_memory_resource<upstream_t> fixed{&upstream_, 64 << 10, 8, rt_};
  walker{rt_, fixed, std::size_t{64} << 10, GetParam()}.run(steps());
}

TEST_P(suballocator_fuzz, Binning)
{
  mr::binning_memory_resource<upstream_t> bins{&upstream_, std::int8_t{8}, std::int8_t{14}, rt_};
  walker{rt_, bins, std::size_t{64} << 10, GetParam()}.run(steps());
}

TEST_P(suballocator_fuzz, VmmPool)
{
  // A small device and small granules: holes, moved granules, releases and out-of-memory.
  detail::host_runtime rt{detail::host_runtime_options{
      .capacity_bytes = std::size_t{24} << 20, .vmm_granularity_bytes = std::size_t{64} << 10}};
  mr::vmm_pool_memory_resource pool{{.reserve_bytes = std::size_t{64} << 20}, rt};
  walker{rt, pool, std::size_t{2} << 20, GetParam()}.run(steps());
  EXPECT_EQ(pool.bad_deallocations(), 0U);
}

TEST_P(suballocator_fuzz, VmmPoolWithThresholdAndGrowth)
{
  detail::host_runtime rt{detail::host_runtime_options{
      .capacity_bytes = std::size_t{24} << 20, .vmm_granularity_bytes = std::size_t{64} << 10}};
  mr::vmm_pool_memory_resource pool{{.reserve_bytes           = std::size_t{64} << 20,
                                     .growth_percent          = 25,
                                     .release_threshold_bytes = std::size_t{1} << 20},
                                    rt};
  walker{rt, pool, std::size_t{2} << 20, GetParam()}.run(steps());
}

TEST_P(suballocator_fuzz, VmmPoolOneStreamOftenWhollyFree)
{
  // Growths move granules, and whenever everything is free the next allocation moves them home
  // (a device large enough that out-of-memory releases, which make a new home, are rare).
  detail::host_runtime rt{detail::host_runtime_options{
      .capacity_bytes = std::size_t{256} << 20, .vmm_granularity_bytes = std::size_t{64} << 10}};
  mr::vmm_pool_memory_resource pool{
      {.reserve_bytes = std::size_t{512} << 20, .handle_bytes = std::size_t{256} << 10}, rt};
  // Ten times the steps: most early runs grow the pool (a new home each time); a run that only
  // moved handles, long enough to be worth moving them back, comes once it has stopped growing.
  walker{rt, pool, std::size_t{2} << 20, GetParam(), true}.run(10 * steps());
  EXPECT_EQ(pool.bad_deallocations(), 0U);
  if (fuzz_reach_checked(default_steps)) {  // the default walks reach it; others may not
    EXPECT_GT(pool.stats().home_returns, 0U) << "the walk took the layout home";
  }
}

INSTANTIATE_TEST_SUITE_P(seeds, suballocator_fuzz,
                         ::testing::ValuesIn(fuzz_seeds({1, 2, 20261122})));

}  // namespace
}  // namespace gpumem::test
