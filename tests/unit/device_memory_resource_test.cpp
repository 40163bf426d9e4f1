// The base classes as a porting target: resources written to RMM's declarations compile and
// work, alignments above 256 are honoured, the queries RMM's resources declare answer through a
// base reference, and host resources fall back for alignments that are not powers of two.
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/detail/over_aligned.hpp>
#include <gpumem/mr/arena_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/new_delete_resource.hpp>
#include <gpumem/mr/pinned_memory_resource.hpp>
#include <gpumem/mr/polymorphic_allocator.hpp>
#include <gpumem/mr/statistics_resource_adaptor.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

namespace gpumem::mr {
namespace {

/// A resource written exactly to RMM's declarations: do_deallocate without noexcept. Counts its
/// calls and throws from do_deallocate when told to.
class rmm_form_resource final : public device_memory_resource {
 public:
  explicit rmm_form_resource(device_memory_resource& upstream) : upstream_{&upstream} {}
  int allocations{0};
  int deallocations{0};
  bool throw_on_free{false};

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    ++allocations;
    return upstream_->allocate(bytes, stream);
  }
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) override
  {
    ++deallocations;
    upstream_->deallocate(ptr, bytes, stream);
    if (throw_on_free) { throw std::runtime_error{"rmm_form_resource: refused"}; }
  }
  device_memory_resource* upstream_;
};

/// The same resource with gpumem's (stricter) noexcept form, plus the queries RMM's resources
/// declare.
class noexcept_form_resource final : public device_memory_resource {
 public:
  explicit noexcept_form_resource(device_memory_resource& upstream) : upstream_{&upstream} {}
  [[nodiscard]] bool supports_streams() const noexcept override { return true; }
  [[nodiscard]] bool supports_get_mem_info() const noexcept override { return true; }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    return upstream_->allocate(bytes, stream);
  }
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    upstream_->deallocate(ptr, bytes, stream);
  }
  [[nodiscard]] std::pair<std::size_t, std::size_t> do_get_mem_info(cuda_stream_view) const override
  {
    return {123, 456};
  }
  device_memory_resource* upstream_;
};

static_assert(noexcept(std::declval<rmm_form_resource&>().deallocate(nullptr, 0)),
              "deallocate stays noexcept whatever form do_deallocate has");
static_assert(gpumem::detail::async_resource_with<rmm_form_resource, cuda::mr::device_accessible>);
static_assert(
    gpumem::detail::async_resource_with<noexcept_form_resource, cuda::mr::device_accessible>);

TEST(device_memory_resource, both_deallocate_forms_compile_and_free)
{
  detail::host_runtime rt;
  cuda_memory_resource cuda{rt};
  rmm_form_resource rmm_form{cuda};
  noexcept_form_resource strict{cuda};
  void* a = rmm_form.allocate(1000);
  void* b = strict.allocate(1000);
  EXPECT_EQ(rt.live_allocations(), 2u);
  rmm_form.deallocate(a, 1000);
  strict.deallocate(b, 1000);
  EXPECT_EQ(rmm_form.deallocations, 1);
  EXPECT_EQ(rt.live_allocations(), 0u);
}

TEST(device_memory_resource, a_throwing_do_deallocate_is_reported_not_propagated)
{
  detail::host_runtime rt;
  cuda_memory_resource cuda{rt};
  rmm_form_resource rmm_form{cuda};
  rmm_form.throw_on_free = true;
  void* p                = rmm_form.allocate(64);
  testing::internal::CaptureStderr();
  rmm_form.deallocate(p, 64);  // noexcept: must not terminate
  auto const err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("rmm_form_resource: refused"), std::string::npos) << err;
  rmm_form.throw_on_free = false;
  void* q                = rmm_form.allocate(64);  // still usable
  rmm_form.deallocate(q, 64);
  EXPECT_EQ(rt.live_allocations(), 0u);
}

TEST(device_memory_resource, alignments_above_256_pad_and_align_through_the_resource)
{
  detail::host_runtime rt;
  cuda_memory_resource cuda{rt};
  statistics_resource_adaptor<cuda_memory_resource> stats{&cuda};
  auto const before = detail::over_aligned_live_count();
  void* p           = stats.allocate(1000, std::size_t{1} << 16);
  EXPECT_TRUE(is_pointer_aligned(p, std::size_t{1} << 16));
  std::memset(p, 7, 1000);  // backed memory: the whole request is usable
  // The resource saw one request of the size rounded to 256 plus the alignment slack.
  EXPECT_EQ(stats.get_bytes_counter().value, 1024 + (std::size_t{1} << 16) - 256);
  EXPECT_EQ(detail::over_aligned_live_count(), before + 1);
  stats.deallocate(p, 1000, std::size_t{1} << 16);
  EXPECT_EQ(stats.get_bytes_counter().value, 0);
  EXPECT_EQ(detail::over_aligned_live_count(), before);
  EXPECT_EQ(rt.live_allocations(), 0u);
}

TEST(device_memory_resource, equal_resources_free_each_others_over_aligned_memory)
{
  detail::host_runtime rt;
  cuda_memory_resource a{rt};
  cuda_memory_resource b{rt};
  ASSERT_TRUE(a == b);
  void* p = a.allocate_async(5000, 4096, cuda_stream_view{});
  b.deallocate_async(p, 5000, 4096, cuda_stream_view{});
  EXPECT_EQ(rt.live_allocations(), 0u);
}

TEST(device_memory_resource, bad_alignments_and_overflow_throw_and_leave_it_usable)
{
  detail::host_runtime rt;
  cuda_memory_resource mr{rt};
  EXPECT_THROW((void)mr.allocate(10, std::size_t{3}), logic_error);
  EXPECT_THROW((void)mr.allocate_async(10, std::size_t{4097}, cuda_stream_view{}), logic_error);
  EXPECT_THROW((void)mr.allocate(SIZE_MAX - 100, std::size_t{4096}), out_of_memory);
  EXPECT_THROW((void)mr.allocate(std::size_t{1} << 40, std::size_t{4096}), out_of_memory);
  EXPECT_EQ(mr.allocate(0, std::size_t{4096}), nullptr);
  mr.deallocate(nullptr, 0, std::size_t{4096});
  void* p = mr.allocate(10, std::size_t{512});
  mr.deallocate(p, 10, std::size_t{512});
  EXPECT_EQ(rt.live_allocations(), 0u);
}

TEST(device_memory_resource, a_foreign_over_aligned_free_is_reported_and_ignored)
{
  detail::host_runtime rt;
  cuda_memory_resource mr{rt};
  void* p = mr.allocate(512);
  testing::internal::CaptureStderr();
  mr.deallocate(p, 512, std::size_t{1024});  // never allocated with that alignment
  auto const err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("not an allocation of this resource"), std::string::npos) << err;
  mr.deallocate(p, 512);
  EXPECT_EQ(rt.live_allocations(), 0u);
}

struct alignas(1024) page_aligned {
  char bytes[1024];
};

TEST(device_memory_resource, polymorphic_allocator_of_an_over_aligned_type)
{
  detail::host_runtime rt;
  cuda_memory_resource mr{rt};
  polymorphic_allocator<page_aligned> alloc{mr};
  page_aligned* p = alloc.allocate(3, cuda_stream_view{});
  EXPECT_TRUE(is_pointer_aligned(p, 1024));
  alloc.deallocate(p, 3, cuda_stream_view{});
  EXPECT_EQ(rt.live_allocations(), 0u);
}

TEST(device_memory_resource, seed_001_queries_answer_through_a_base_reference)
{
  detail::host_runtime rt;
  cuda_memory_resource cuda{rt};
  noexcept_form_resource custom{cuda};
  arena_memory_resource<cuda_memory_resource> arena{&cuda, std::size_t{4} << 20, false, rt};
  device_memory_resource const& base_custom = custom;
  device_memory_resource const& base_arena  = arena;
  device_memory_resource const& base_cuda   = cuda;
  EXPECT_TRUE(base_custom.supports_streams());
  EXPECT_TRUE(base_custom.supports_get_mem_info());
  EXPECT_EQ(base_custom.get_mem_info(cuda_stream_view{}),
            (std::pair<std::size_t, std::size_t>{123, 456}));
  EXPECT_TRUE(base_arena.supports_streams());
  EXPECT_FALSE(base_arena.supports_get_mem_info());
  EXPECT_FALSE(base_cuda.supports_streams());  // the defaults
  EXPECT_FALSE(base_cuda.supports_get_mem_info());
  EXPECT_EQ(base_cuda.get_mem_info(cuda_stream_view{}),
            (std::pair<std::size_t, std::size_t>{0, 0}));
}

TEST(host_memory_resource, non_power_of_two_alignment_falls_back_to_max_align)
{
  new_delete_resource mr;
  for (std::size_t alignment : {3, 24, 100}) {
    void* p = mr.allocate(40, alignment);
    EXPECT_TRUE(is_pointer_aligned(p, alignof(std::max_align_t)));
    mr.deallocate(p, 40, alignment);
  }
  void* q = mr.allocate(40, 4096);
  EXPECT_TRUE(is_pointer_aligned(q, 4096));
  mr.deallocate(q, 40, 4096);
}

TEST(host_memory_resource, pinned_falls_back_too_and_frees_everything)
{
  detail::host_runtime rt;
  pinned_memory_resource mr{rt};
  void* p = mr.allocate(100, 300);  // not a power of two: max_align_t
  EXPECT_TRUE(is_pointer_aligned(p, alignof(std::max_align_t)));
  void* q = mr.allocate(100, 8192);
  EXPECT_TRUE(is_pointer_aligned(q, 8192));
  mr.deallocate(p, 100, 300);
  mr.deallocate(q, 100, 8192);
  EXPECT_EQ(rt.live_allocations(), 0u);
}

}  // namespace
}  // namespace gpumem::mr
