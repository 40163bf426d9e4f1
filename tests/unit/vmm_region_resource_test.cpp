// vmm_region_resource over the host stand-in: allocations routed to one pool per region by a
// thread-local, nestable region_scope; frees routed by address; one region paused and resumed
// without touching the others; the worked example of docs/sleep.md.
#include "suballocator_test_helpers.hpp"

#include <gpumem/mr/vmm_region_resource.hpp>

#include <cstring>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

using mr::region_scope;
using mr::vmm_region_resource;

struct vmm_region : ::testing::Test {
  detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = 256 * MiB}};
  cudaStream_t s = rt.create_stream();
  vmm_region_resource res{mr::vmm_pool_options{.reserve_bytes = 128 * MiB}, rt};

  /// True when p lies in the address range of region `tag`.
  bool in(std::string_view tag, void const* p)
  {
    auto const [base, n] = res.region(tag).reserved_range();
    auto const* b        = static_cast<char const*>(base);
    return p >= b && static_cast<char const*>(p) < b + n;
  }
  void check()
  {
    res.check_invariants();
    rt.check_invariants();
  }
};

TEST_F(vmm_region, ScopesRouteAllocationsAndNest)
{
  void* outside = res.allocate(MiB, s);
  EXPECT_TRUE(in("default", outside));
  EXPECT_EQ(res.current_region(), "default");
  void* kv{};
  void* w{};
  void* kv_again{};
  {
    region_scope kv_scope{res, "kv_cache"};
    EXPECT_EQ(res.current_region(), "kv_cache");
    kv = res.allocate(MiB, s);
    {
      region_scope w_scope{res, "weights"};
      EXPECT_EQ(res.current_region(), "weights");
      w = res.allocate(3 * MiB, s);
    }
    kv_again = res.allocate(MiB, s);
  }
  EXPECT_EQ(res.current_region(), "default");
  EXPECT_TRUE(in("kv_cache", kv));
  EXPECT_TRUE(in("kv_cache", kv_again));
  EXPECT_TRUE(in("weights", w));
  EXPECT_FALSE(in("default", w));
  EXPECT_EQ(res.regions(), (std::vector<std::string>{"default", "kv_cache", "weights"}));
  // Freed from anywhere: the address says which region.
  {
    region_scope other{res, "weights"};
    res.deallocate(kv, MiB, s);
    res.deallocate(outside, MiB, s);
  }
  res.deallocate(w, 3 * MiB, s);
  res.deallocate(kv_again, MiB, s);
  EXPECT_EQ(res.bad_deallocations(), 0U);
  for (auto const& name : res.regions()) {
    EXPECT_EQ(res.stats(name).free_bytes, res.region(name).pool_size());
  }
  check();
}

TEST_F(vmm_region, PausingOneRegionLeavesTheOthersAlone)
{
  void* kv{};
  void* w{};
  {
    region_scope scope{res, "kv_cache"};
    kv = res.allocate(8 * MiB, s);
  }
  {
    region_scope scope{res, "weights"};
    w = res.allocate(8 * MiB, s);
  }
  std::memset(w, 0x5a, 8 * MiB);
  auto const weights_mapped = res.stats("weights").mapped_bytes;
  EXPECT_TRUE(res.pause("kv_cache", pause_mode::discard));
  EXPECT_EQ(res.state("kv_cache"), pause_state::paused_discarded);
  EXPECT_EQ(res.state("weights"), pause_state::active);
  EXPECT_EQ(rt.vmm_state().physical_bytes, weights_mapped);
  EXPECT_EQ(static_cast<unsigned char*>(w)[8 * MiB - 1], 0x5a);
  {
    region_scope scope{res, "kv_cache"};
    EXPECT_THROW((void)res.allocate(MiB, s), paused_error);
    region_scope inner{res, "weights"};
    res.deallocate(res.allocate(MiB, s), MiB, s);  // the weights region still serves
  }
  res.deallocate(kv, 8 * MiB, s);  // freed while paused
  EXPECT_TRUE(res.resume("kv_cache"));
  EXPECT_FALSE(res.resume("kv_cache"));
  res.deallocate(w, 8 * MiB, s);
  check();
}

TEST_F(vmm_region, PauseAllAndResumeAllCountWhatTheyChanged)
{
  {
    region_scope scope{res, "a"};
    res.deallocate(res.allocate(MiB, s), MiB, s);
  }
  EXPECT_TRUE(res.pause("a", pause_mode::discard));
  EXPECT_EQ(res.pause_all(pause_mode::offload), 1U);  // default; "a" was paused already
  EXPECT_EQ(res.state("a"), pause_state::paused_discarded);
  EXPECT_EQ(res.state("default"), pause_state::paused_offloaded);
  EXPECT_EQ(rt.vmm_state().physical_bytes, 0U);
  EXPECT_EQ(res.resume_all(), 2U);
  EXPECT_EQ(res.resume_all(), 0U);
  check();
}

TEST_F(vmm_region, TrimGivesBackEveryRegionsFreeMemoryAndKeepsWhatIsLive)
{
  void* live{};
  {
    region_scope scope{res, "a"};
    res.deallocate(res.allocate(8 * MiB, s), 8 * MiB, s);
    live = res.allocate(MiB, s);
  }
  {
    region_scope scope{res, "b"};
    res.deallocate(res.allocate(4 * MiB, s), 4 * MiB, s);
  }
  ASSERT_GE(rt.vmm_state().physical_bytes, 12 * MiB);
  mr::trimmable& t = res;  // what gpumem.torch.empty_cache asks a resource object
  t.trim();
  EXPECT_EQ(res.stats("b").mapped_bytes, 0U);
  // region a keeps the physical handle under its live MiB (a handle is unmapped whole): here the
  // 8 MiB one its first growth made
  EXPECT_GT(res.stats("a").mapped_bytes, 0U);
  EXPECT_LE(res.stats("a").mapped_bytes, 8 * MiB);
  // what a trim unmaps stays held as spare handles (up to spare_bytes a region) for its next growth
  EXPECT_EQ(rt.vmm_state().mapped_bytes, res.stats("a").mapped_bytes);
  EXPECT_EQ(rt.vmm_state().physical_bytes, res.stats("a").held_bytes + res.stats("b").held_bytes);
  EXPECT_EQ(res.stats("b").held_bytes, res.stats("b").spare_bytes);
  std::memset(live, 0x5A, MiB);  // still mapped
  res.deallocate(live, MiB, s);
  check();
}

TEST_F(vmm_region, ScopesBelongToTheirThreadAndTheirResource)
{
  vmm_region_resource other{mr::vmm_pool_options{.reserve_bytes = 64 * MiB}, rt};
  constexpr int threads = 4;
  std::vector<std::vector<void*>> got(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      region_scope mine{res, "thread" + std::to_string(t % 2)};
      region_scope elsewhere{other, "ignored by res"};
      for (int i = 0; i < 50; ++i) {
        got[t].push_back(res.allocate(64 * 1024, cudaStreamPerThread));
      }
    });
  }
  void* main_thread = res.allocate(MiB, s);  // no scope on this thread
  for (auto& th : pool) { th.join(); }
  EXPECT_TRUE(in("default", main_thread));
  for (int t = 0; t < threads; ++t) {
    for (void* p : got[t]) {
      EXPECT_TRUE(in("thread" + std::to_string(t % 2), p)) << "thread " << t;
      res.deallocate(p, 64 * 1024, s);
    }
  }
  res.deallocate(main_thread, MiB, s);
  EXPECT_EQ(other.regions(), (std::vector<std::string>{"default", "ignored by res"}));
  check();
}

TEST_F(vmm_region, MisuseIsReported)
{
  EXPECT_THROW(region_scope(res, ""), logic_error);
  try {
    res.pause("kv_cach", pause_mode::discard);  // a typo creates nothing
    FAIL() << "paused a region that does not exist";
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("'kv_cach' (regions: default)"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)res.state("nope"), logic_error);
  EXPECT_EQ(res.regions(), std::vector<std::string>{"default"});
  int on_host{};
  res.deallocate(&on_host, 4, s);  // reported, never thrown
  EXPECT_EQ(res.bad_deallocations(), 1U);
  check();
}

// docs/sleep.md's worked example: the weights are offloaded and the KV cache discarded while the
// trainer uses the device; on wake the same pointers hold the same weights.
TEST_F(vmm_region, WeightsOffloadedKvCacheDiscardedTrainingInBetween)
{
  std::vector<void*> weights;
  void* kv{};
  {
    region_scope scope{res, "weights"};
    for (int i = 0; i < 4; ++i) {
      weights.push_back(res.allocate(5 * MiB, s));
      std::memset(weights.back(), 0x10 + i, 5 * MiB);
    }
  }
  {
    region_scope scope{res, "kv_cache"};
    kv = res.allocate(40 * MiB, s);
  }
  auto const inference_peak = rt.vmm_state().physical_bytes;
  res.pause("weights", pause_mode::offload);
  res.pause("kv_cache", pause_mode::discard);
  EXPECT_EQ(rt.vmm_state().physical_bytes, 0U);
  {
    // Training takes the device's memory (the default region here) and gives it back.
    void* grads = res.allocate(inference_peak, s);
    res.deallocate(grads, inference_peak, s);
    EXPECT_GT(res.region("default").trim_to(0), 0U);
  }
  res.resume("weights");
  res.resume("kv_cache");
  for (int i = 0; i < 4; ++i) {
    auto const* bytes = static_cast<unsigned char const*>(weights[static_cast<std::size_t>(i)]);
    EXPECT_EQ(bytes[0], 0x10 + i);
    EXPECT_EQ(bytes[5 * MiB - 1], 0x10 + i);
  }
  std::memset(kv, 0, 40 * MiB);  // the KV cache is refilled by the next prefill
  for (void* w : weights) { res.deallocate(w, 5 * MiB, s); }
  res.deallocate(kv, 40 * MiB, s);
  check();
}

}  // namespace
}  // namespace gpumem::test
