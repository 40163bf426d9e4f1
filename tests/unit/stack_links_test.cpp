// The upstream lifetime rule and the stack depth limit (detail/stack_links.hpp): every build
// aborts with a clear message when an upstream is destroyed before a resource built over it; a
// stack deeper than max_stack_depth is refused when it is built (C++ constructors, resource
// specs), never a stack overflow on the first allocation.
#include "adaptor_test_support.hpp"

#include <gpumem/mr/limiting_resource_adaptor.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/statistics_resource_adaptor.hpp>
#include <gpumem/spec/resource_factory.hpp>
#include <gpumem/spec/resource_spec.hpp>

#include <memory>
#include <string>
#include <vector>

namespace gpumem::test {
namespace {

using stats_t = mr::statistics_resource_adaptor<mr::device_memory_resource>;
using pool_t  = mr::pool_memory_resource<mr::device_memory_resource>;

class stack_links : public host_upstream {};

TEST_F(stack_links, DepthCountsTheResourcesBelow)
{
  EXPECT_EQ(base.stack_depth(), 1U);
  pool_t pool{&base, 1 << 20, std::nullopt, rt};
  stats_t stats{&pool};
  EXPECT_EQ(pool.stack_depth(), 2U);
  EXPECT_EQ(stats.stack_depth(), 3U);
  // An upstream given as a resource ref is not visible: the depth starts again.
  stats_t over_ref{device_async_resource_ref{pool}};
  EXPECT_EQ(over_ref.stack_depth(), 1U);
}

TEST_F(stack_links, TooDeepAStackIsRefusedAtConstructionAndTheRestStaysUsable)
{
  std::vector<std::unique_ptr<stats_t>> chain;
  mr::device_memory_resource* top = &base;
  while (top->stack_depth() < max_stack_depth) {
    chain.push_back(std::make_unique<stats_t>(top));
    top = chain.back().get();
  }
  std::string message;
  try {
    stats_t one_more{top};
  } catch (logic_error const& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("at most " + std::to_string(max_stack_depth) + " resources"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find(std::to_string(max_stack_depth + 1) + " deep"), std::string::npos)
      << message;
  void* p = top->allocate(4096);  // the deepest allowed stack allocates through every layer
  top->deallocate(p, 4096);
  while (!chain.empty()) { chain.pop_back(); }  // top down
}

TEST_F(stack_links, DestroyedTopDownIsFine)
{
  auto pool  = std::make_unique<pool_t>(&base, 1 << 20, std::nullopt, rt);
  auto limit = std::make_unique<mr::limiting_resource_adaptor<pool_t>>(pool.get(), 1 << 19);
  void* p    = limit->allocate(1000);
  limit->deallocate(p, 1000);
  limit.reset();
  pool.reset();
}

TEST_F(stack_links, DestroyingAnUpstreamFirstAbortsWithTheRule)
{
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto pool = std::make_unique<pool_t>(&base, 1 << 20, std::nullopt, rt);
        stats_t first{pool.get()};
        stats_t second{pool.get()};
        pool.reset();  // two resources still use it
      },
      "a memory resource \\(at 0x[0-9a-f]+\\) was destroyed while 2 resources built over it "
      "still exist; an upstream must outlive every resource built over it");
}

TEST(stack_links_spec, TooManyLayersInASpecAreASpecError)
{
  std::string deep = "statistics";
  for (std::size_t i = 1; i < max_stack_depth + 50; ++i) { deep += ">statistics"; }
  std::string message;
  try {
    (void)spec::parse_resource_spec(deep);
  } catch (spec::spec_error const& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("at most " + std::to_string(max_stack_depth) + " layers; this one has " +
                         std::to_string(max_stack_depth + 50)),
            std::string::npos)
      << message;
  // max_stack_depth layers parse, but with the cuda leaf below they are one too many to build.
  std::string at_limit = "statistics";
  for (std::size_t i = 1; i < max_stack_depth; ++i) { at_limit += ">statistics"; }
  EXPECT_EQ(spec::parse_resource_spec(at_limit).layers.size(), max_stack_depth);
  detail::host_runtime rt{};
  message.clear();
  try {
    (void)spec::build(at_limit, rt, true);
  } catch (spec::spec_error const& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("needs " + std::to_string(max_stack_depth + 1)), std::string::npos)
      << message;
  auto const fits = at_limit.substr(std::string{">statistics"}.size()) + ">cuda";
  auto stack      = spec::build(fits, rt, true);
  EXPECT_EQ(stack.top().stack_depth(), max_stack_depth);
  void* p = stack.top().allocate(256);
  stack.top().deallocate(p, 256);
}

TEST(stack_links_spec, AssigningOverAStackDestroysTheOldOneTopDown)
{
  detail::host_runtime rt{};
  auto stack = spec::build("statistics>limiting:limit=1MiB>pool:initial=1MiB>cuda", rt, true);
  stack      = spec::build("pool:initial=1MiB>cuda", rt, true);  // debug builds abort if not
  EXPECT_EQ(stack.size(), 2U);
}

}  // namespace
}  // namespace gpumem::test
