// owning_wrapper and make_owning_wrapper: shared ownership, both factory forms, destruction order.
#include "adaptor_test_support.hpp"

#include <gpumem/mr/aligned_resource_adaptor.hpp>
#include <gpumem/mr/failure_callback_resource_adaptor.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/mr/owning_wrapper.hpp>
#include <gpumem/mr/statistics_resource_adaptor.hpp>

#include <string>
#include <vector>

namespace gpumem::test {
namespace {

std::vector<std::string> destroyed;  // names in destruction order

/// RMM's documented example_resource: two upstreams and two extra arguments.
template <typename Upstream1, typename Upstream2>
class example_resource final : public mr::device_memory_resource {
 public:
  example_resource(Upstream1* u1, Upstream2* u2, int n, float f) : u1_{u1}, u2_{u2}, n_{n}, f_{f} {}
  ~example_resource() override { destroyed.emplace_back("example"); }
  Upstream1* u1_;
  Upstream2* u2_;
  int n_;
  float f_;

 private:
  void* do_allocate(std::size_t b, cuda_stream_view s) override { return u1_->allocate(b, s); }
  void do_deallocate(void* p, std::size_t b, cuda_stream_view s) noexcept override
  {
    u1_->deallocate(p, b, s);
  }
};

/// A cuda_memory_resource (which is final) that records its destruction.
class named_cuda final : public mr::device_memory_resource {
 public:
  explicit named_cuda(detail::runtime& rt) : cuda_{rt} {}
  ~named_cuda() override { destroyed.emplace_back("upstream"); }

 private:
  void* do_allocate(std::size_t b, cuda_stream_view s) override { return cuda_.allocate(b, s); }
  void do_deallocate(void* p, std::size_t b, cuda_stream_view s) noexcept override
  {
    cuda_.deallocate(p, b, s);
  }
  mr::cuda_memory_resource cuda_;
};

TEST(owning_wrapper_test, TupleFormBuildsTheSeedExampleAndOutlivesTheCaller)
{
  detail::host_runtime rt{};
  destroyed.clear();
  auto cuda_mr   = std::make_shared<named_cuda>(rt);
  auto upstreams = std::make_tuple(cuda_mr, cuda_mr);
  auto wrapped   = mr::make_owning_wrapper<example_resource>(upstreams, 42, 3.14f);
  static_assert(
      std::is_same_v<
          decltype(wrapped)::element_type,
          mr::owning_wrapper<example_resource<named_cuda, named_cuda>, named_cuda, named_cuda>>);
  EXPECT_EQ(wrapped->wrapped().n_, 42);
  EXPECT_FLOAT_EQ(wrapped->wrapped().f_, 3.14f);
  EXPECT_EQ(wrapped->wrapped().u1_, cuda_mr.get());
  EXPECT_EQ(wrapped->wrapped().u2_, cuda_mr.get());
  std::weak_ptr<named_cuda> watch = cuda_mr;
  cuda_mr.reset();
  upstreams = {};
  void* p   = wrapped->allocate(1024);  // the upstream is still alive
  wrapped->deallocate(p, 1024);
  EXPECT_FALSE(watch.expired());
  wrapped.reset();
  EXPECT_TRUE(watch.expired());
  EXPECT_EQ(destroyed, (std::vector<std::string>{"example", "upstream"}));
}

TEST(owning_wrapper_test, SingleUpstreamFormForwardsArguments)
{
  detail::host_runtime rt{};
  auto cuda    = std::make_shared<mr::cuda_memory_resource>(rt);
  auto stats   = mr::make_owning_wrapper<mr::statistics_resource_adaptor>(cuda);
  auto aligned = mr::make_owning_wrapper<mr::aligned_resource_adaptor>(cuda, 4096, 0);
  auto retry   = mr::make_owning_wrapper<mr::failure_callback_resource_adaptor>(
      cuda, [](std::size_t, void*) { return false; }, nullptr);
  void* p = aligned->allocate(100);
  EXPECT_TRUE(is_pointer_aligned(p, 4096));
  aligned->deallocate(p, 100);
  void* q = stats->allocate(300);
  EXPECT_EQ(stats->wrapped().get_bytes_counter().value, 300);
  EXPECT_TRUE(*stats == *stats);
  EXPECT_FALSE(*stats == *aligned);
  stats->deallocate(q, 300);
  EXPECT_EQ(std::get<0>(retry->upstream_resources()), cuda);
  EXPECT_TRUE(mr::is_resource_adaptor<decltype(*stats)>);
  EXPECT_TRUE(stats->get_upstream_resource() == device_async_resource_ref{stats->wrapped()});
  EXPECT_EQ(rt.live_allocations(), 0u);
}

TEST(owning_wrapper_test, PropertiesComeFromTheWrappedResource)
{
  using managed_stats = mr::statistics_resource_adaptor<mr::managed_memory_resource>;
  static_assert(gpumem::detail::async_resource_with<
                mr::owning_wrapper<managed_stats, mr::managed_memory_resource>,
                cuda::mr::device_accessible, cuda::mr::host_accessible>);
  static_assert(!gpumem::detail::async_resource_with<
                mr::owning_wrapper<mr::statistics_resource_adaptor<mr::cuda_memory_resource>,
                                   mr::cuda_memory_resource>,
                cuda::mr::host_accessible>);
}

}  // namespace
}  // namespace gpumem::test
