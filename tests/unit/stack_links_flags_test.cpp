// The lifetime check does not depend on the consumer's build flags: this file is compiled with
// NDEBUG the other way round from the library (set when the library is a debug build, unset
// when it is a release build), as a consumer's default CMake build against an installed
// release library is. A caching_memory_resource (constructor inline here, destructor in the
// library) destroyed in the right order must not abort, and a wrong order is still caught.
#ifdef NDEBUG
#undef NDEBUG
#else
#define NDEBUG
#endif

#include <gpumem/mr/caching_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/simulated_device.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <optional>

namespace gpumem::test {
namespace {

TEST(stack_links_flags, CachingOverCudaDestroyedTopDownIsFine)
{
  simulated_device sim;
  auto cuda  = std::make_unique<mr::cuda_memory_resource>(sim);
  auto cache = std::make_unique<mr::caching_memory_resource>(
      cuda.get(), mr::caching_memory_resource_options{}, sim);
  void* p = cache->allocate(1000);
  cache->deallocate(p, 1000);
  cache.reset();
  cuda.reset();  // aborted here when only one side of the link counted
}

TEST(stack_links_flags, DestroyingAnUpstreamFirstAbortsInEveryBuild)
{
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        simulated_device sim;
        auto cuda  = std::make_unique<mr::cuda_memory_resource>(sim);
        auto cache = std::make_unique<mr::caching_memory_resource>(
            cuda.get(), mr::caching_memory_resource_options{}, sim);
        cuda.reset();
      },
      "an upstream must outlive every resource built over it");
}

}  // namespace
}  // namespace gpumem::test
