// prefetch_resource_adaptor: every allocation is prefetched on its own stream (host model).
#include "adaptor_test_support.hpp"

#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/mr/prefetch_resource_adaptor.hpp>

namespace gpumem::test {
namespace {

using prefetch = mr::prefetch_resource_adaptor<mr::managed_memory_resource>;

TEST(prefetch_test, PrefetchesOnTheAllocationStream)
{
  detail::host_runtime rt{};
  mr::managed_memory_resource managed{rt};
  prefetch mr{&managed, rt};
  auto const s1 = rt.create_stream();
  auto const s2 = rt.create_stream();
  void* p       = mr.allocate(1 << 20, s1);
  EXPECT_EQ(rt.enqueued(s1), 1u);  // the migration is work on s1
  EXPECT_EQ(rt.enqueued(s2), 0u);
  void* q = mr.allocate(4096, s2);
  EXPECT_EQ(rt.enqueued(s2), 1u);
  EXPECT_EQ(rt.enqueued(s1), 1u);
  mr.deallocate(p, 1 << 20, s1);
  mr.deallocate(q, 4096, s2);
  EXPECT_EQ(rt.live_allocations(), 0u);
}

TEST(prefetch_test, IsHostAccessibleOverManagedAndRejectsNullUpstream)
{
  static_assert(gpumem::detail::async_resource_with<prefetch, cuda::mr::device_accessible,
                                                    cuda::mr::host_accessible>);
  static_assert(mr::is_resource_adaptor<prefetch>);
  detail::host_runtime rt{};
  EXPECT_THROW((prefetch{static_cast<mr::managed_memory_resource*>(nullptr), rt}),
               gpumem::logic_error);
  mr::managed_memory_resource managed{rt};
  prefetch a{device_async_resource_ref{managed}, rt};
  prefetch b{std::move(a)};
  void* p = b.allocate(256);
  b.deallocate(p, 256);
}

TEST(prefetch_test, UpstreamFailureIsNotPrefetched)
{
  detail::host_runtime rt{};
  mr::managed_memory_resource managed{rt};
  prefetch mr{&managed, rt};
  auto const s = rt.create_stream();
  rt.fail_next_allocations(1);
  EXPECT_THROW((void)mr.allocate(4096, s), gpumem::out_of_memory);
  EXPECT_EQ(rt.enqueued(s), 0u);
}

}  // namespace
}  // namespace gpumem::test
