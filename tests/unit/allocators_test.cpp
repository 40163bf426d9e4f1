// polymorphic_allocator and stream_allocator_adaptor over host-backed memory (readable here).
#include "adaptor_test_support.hpp"

#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/mr/polymorphic_allocator.hpp>
#include <gpumem/mr/statistics_resource_adaptor.hpp>
#include <gpumem/mr/stream_allocator_adaptor.hpp>

#include <memory>
#include <numeric>
#include <vector>

namespace gpumem::test {
namespace {

using allocators_test = host_upstream;

TEST_F(allocators_test, PolymorphicAllocatorDefaultsToTheCurrentDeviceResource)
{
  auto const previous = mr::set_current_device_resource_ref(base);
  mr::polymorphic_allocator<int> a;
  EXPECT_TRUE(a.get_upstream_resource() == device_async_resource_ref{base});
  mr::set_current_device_resource_ref(previous);
  mr::polymorphic_allocator<int> b;  // made after the reset: the previous resource
  EXPECT_TRUE(b.get_upstream_resource() == previous);
}

TEST_F(allocators_test, PolymorphicAllocatorAllocatesTypedStorageOnAStream)
{
  mr::statistics_resource_adaptor<mr::cuda_memory_resource> stats{&base};
  mr::polymorphic_allocator<double> a{stats};
  auto const s = rt.create_stream();
  double* p    = a.allocate(100, s);
  EXPECT_EQ(stats.get_bytes_counter().value, 800);
  std::fill_n(p, 100, 1.5);
  a.deallocate(p, 100, s);
  EXPECT_EQ(stats.get_bytes_counter().value, 0);
  EXPECT_THROW((void)a.allocate(SIZE_MAX / 4, s), gpumem::out_of_memory);
  mr::polymorphic_allocator<char> c{a};  // converting copy: same resource
  EXPECT_TRUE(c == a);
  mr::polymorphic_allocator<char> other{device_async_resource_ref{base}};
  EXPECT_TRUE(other != a);
}

TEST_F(allocators_test, StreamAllocatorAdaptorIsAStandardAllocatorOnItsStream)
{
  mr::statistics_resource_adaptor<mr::cuda_memory_resource> stats{&base};
  auto const s = rt.create_stream();
  auto adapted = mr::stream_allocator_adaptor(mr::polymorphic_allocator<int>{stats}, s);
  EXPECT_EQ(adapted.stream(), cuda_stream_view{s});
  int* p = std::allocator_traits<decltype(adapted)>::allocate(adapted, 10);
  EXPECT_EQ(stats.get_bytes_counter().value, 40);
  std::allocator_traits<decltype(adapted)>::deallocate(adapted, p, 10);
  std::vector<int, decltype(adapted)> v(adapted);
  v.resize(1000);
  std::iota(v.begin(), v.end(), 0);
  EXPECT_EQ(std::accumulate(v.begin(), v.end(), 0L), 999L * 1000 / 2);
  EXPECT_GT(stats.get_bytes_counter().value, 0);
  v = {};
  v.shrink_to_fit();
  EXPECT_EQ(stats.get_bytes_counter().value, 0);
}

TEST_F(allocators_test, StreamAllocatorAdaptorRebindsAndComparesByAllocator)
{
  using adaptor = mr::stream_allocator_adaptor<mr::polymorphic_allocator<int>>;
  using rebound = std::allocator_traits<adaptor>::rebind_alloc<double>;
  static_assert(
      std::is_same_v<rebound, mr::stream_allocator_adaptor<mr::polymorphic_allocator<double>>>);
  static_assert(std::is_same_v<adaptor::rebind<float>::other,
                               mr::stream_allocator_adaptor<mr::polymorphic_allocator<float>>>);
  static_assert(!std::is_default_constructible_v<adaptor>);
  auto const s1 = rt.create_stream();
  auto const s2 = rt.create_stream();
  adaptor a{mr::polymorphic_allocator<int>{base}, s1};
  rebound r{a};  // converting: same allocator, same stream
  EXPECT_EQ(r.stream(), a.stream());
  EXPECT_TRUE(r.underlying_allocator() == a.underlying_allocator());
  adaptor b{mr::polymorphic_allocator<int>{base}, s2};
  EXPECT_TRUE(a == b);  // the stream does not matter
  EXPECT_TRUE(a == r);
  mr::statistics_resource_adaptor<mr::cuda_memory_resource> stats{&base};
  adaptor c{mr::polymorphic_allocator<int>{stats}, s1};
  EXPECT_TRUE(a != c);
}

}  // namespace
}  // namespace gpumem::test
