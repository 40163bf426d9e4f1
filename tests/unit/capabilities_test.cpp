// What a stack built from a spec asks of its layers through the capability interfaces
// (gpumem/mr/capabilities.hpp) rather than by casting to concrete types: trim, block rounding,
// counters, log flushing, and the per-thread cache's wiring to the pool below it.
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/binning_memory_resource.hpp>
#include <gpumem/mr/capabilities.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/thread_cache_resource_adaptor.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>
#include <gpumem/spec/resource_factory.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace gpumem::test {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

struct capabilities : ::testing::Test {
  detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = std::size_t{1} << 30}};
};

[[nodiscard]] double counter(spec::resource_stack const& stack, std::string const& name)
{
  auto const all = stack.counters();
  auto it = std::find_if(all.begin(), all.end(), [&](auto const& c) { return c.first == name; });
  return it == all.end() ? -1.0 : it->second;
}

static_assert(std::is_base_of_v<mr::trimmable, mr::vmm_pool_memory_resource>);
static_assert(std::is_base_of_v<mr::pool_size_source, mr::vmm_pool_memory_resource>);
static_assert(
    std::is_base_of_v<mr::block_rounding, mr::binning_memory_resource<mr::device_memory_resource>>);
static_assert(
    !std::is_base_of_v<mr::trimmable, mr::pool_memory_resource<mr::device_memory_resource>>);

TEST_F(capabilities, TrimReachesTheVirtualMemoryPoolUnderACache)
{
  auto stack = spec::build("thread_cache>vmm_pool", rt, true);
  void* p    = stack.top().allocate(4 * MiB, cuda_stream_view{});
  stack.top().deallocate(p, 4 * MiB, cuda_stream_view{});
  EXPECT_GT(rt.vmm_state().handles, 0U) << "the block waits in the cache, its memory mapped";
  stack.trim();
  EXPECT_EQ(rt.vmm_state().mappings, 0U) << "every free granule unmapped";
}

TEST_F(capabilities, RoundingLayersGiveTheBlockARequestTakes)
{
  auto binning = spec::build("binning:min=512B,max=1MiB>cuda", rt, true);
  EXPECT_EQ(binning.granted_bytes(600), 1024U);
  EXPECT_EQ(binning.granted_bytes(2 * MiB), 2 * MiB) << "above the bins: passes through";
  auto fixed = spec::build("fixed_size:block=64KiB,blocks=2>cuda", rt, true);
  EXPECT_EQ(fixed.granted_bytes(100), 64U << 10);
  auto plain = spec::build("pool>cuda", rt, true);
  EXPECT_EQ(plain.granted_bytes(100), 256U) << "no rounding layer: 256-byte alignment";
  auto outer = spec::build("binning:min=512B,max=4KiB>pool>cuda", rt, true);
  EXPECT_EQ(outer.granted_bytes(3000), 4096U);
  EXPECT_EQ(outer.granted_bytes(10000), 10240U) << "above the bins: 256-byte alignment";
  EXPECT_EQ(outer.grant_function()(3000), 4096U);
}

TEST_F(capabilities, CountersComeFromTheLayersThatKeepThem)
{
  auto cached = spec::build("thread_cache>pool>cuda", rt, true);
  void* p     = cached.top().allocate(4096, cuda_stream_view{});
  cached.top().deallocate(p, 4096, cuda_stream_view{});
  p = cached.top().allocate(4096, cuda_stream_view{});
  cached.top().deallocate(p, 4096, cuda_stream_view{});
  EXPECT_EQ(counter(cached, "cache_hits"), 1.0);
  EXPECT_EQ(counter(cached, "cache_misses"), 1.0);
  EXPECT_TRUE(spec::build("pool>cuda", rt, true).counters().empty());
}

TEST_F(capabilities, ACacheBuiltFromASpecIsWiredToThePoolBelow)
{
  for (char const* text : {"thread_cache>vmm_pool", "thread_cache>pool>cuda"}) {
    auto stack  = spec::build(text, rt, true);
    using cache = mr::thread_cache_resource_adaptor<mr::device_memory_resource>;
    auto* c     = dynamic_cast<cache*>(&stack.top());
    ASSERT_NE(c, nullptr) << text;
    EXPECT_NE(c->options().upstream_growth, nullptr) << text << ": flushed before the pool grows";
    EXPECT_TRUE(static_cast<bool>(c->options().upstream_pool_bytes)) << text;
  }
  auto over_leaf = spec::build("thread_cache>cuda", rt, true);
  auto* c        = dynamic_cast<mr::thread_cache_resource_adaptor<mr::device_memory_resource>*>(
      &over_leaf.top());
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->options().upstream_growth, nullptr);
  EXPECT_FALSE(static_cast<bool>(c->options().upstream_pool_bytes));
}

}  // namespace
}  // namespace gpumem::test
