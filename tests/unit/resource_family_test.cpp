// The resource family as RMM documents it, over the host stand-in: implicit constructors,
// move assignment, get_upstream_resource, the six resource-ref aliases, pinned host memory's
// logic, sam_headroom's advice, the tracking debug sink and the scoped device switch.
#include "adaptor_test_support.hpp"

#include <gpumem/detail/pinned_host.hpp>
#include <gpumem/detail/scoped_current_device.hpp>
#include <gpumem/mr/aligned_resource_adaptor.hpp>
#include <gpumem/mr/callback_memory_resource.hpp>
#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/cuda_async_view_memory_resource.hpp>
#include <gpumem/mr/failure_callback_resource_adaptor.hpp>
#include <gpumem/mr/limiting_resource_adaptor.hpp>
#include <gpumem/mr/logging_resource_adaptor.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/mr/new_delete_resource.hpp>
#include <gpumem/mr/owning_wrapper.hpp>
#include <gpumem/mr/pinned_host_memory_resource.hpp>
#include <gpumem/mr/pinned_memory_resource.hpp>
#include <gpumem/mr/prefetch_resource_adaptor.hpp>
#include <gpumem/mr/sam_headroom_memory_resource.hpp>
#include <gpumem/mr/statistics_resource_adaptor.hpp>
#include <gpumem/mr/thread_safe_resource_adaptor.hpp>
#include <gpumem/mr/tracking_resource_adaptor.hpp>

#include <memory>
#include <optional>
#include <sstream>
#include <type_traits>

namespace gpumem::test {
namespace {

using cuda_mr = mr::cuda_memory_resource;
using family  = host_upstream;

// Constructors RMM documents as implicit convert (so `adaptor a = &upstream;` ports).
static_assert(std::is_convertible_v<cuda_mr*, mr::statistics_resource_adaptor<cuda_mr>>);
static_assert(std::is_convertible_v<cuda_mr*, mr::thread_safe_resource_adaptor<cuda_mr>>);
static_assert(std::is_convertible_v<cuda_mr*, mr::tracking_resource_adaptor<cuda_mr>>);
static_assert(std::is_convertible_v<cuda_mr*, mr::prefetch_resource_adaptor<cuda_mr>>);
static_assert(
    std::is_convertible_v<device_async_resource_ref, mr::statistics_resource_adaptor<cuda_mr>>);
static_assert(std::is_convertible_v<cudaMemPool_t, mr::cuda_async_view_memory_resource>);
static_assert(std::is_convertible_v<std::optional<std::size_t>, mr::cuda_async_memory_resource>);
static_assert(
    std::is_convertible_v<std::tuple<std::shared_ptr<cuda_mr>>,
                          mr::owning_wrapper<mr::statistics_resource_adaptor<cuda_mr>, cuda_mr>>);
// RMM keeps these explicit; so do we.
static_assert(!std::is_convertible_v<cuda_mr*, mr::aligned_resource_adaptor<cuda_mr>>);

template <typename Adaptor>
void expect_upstream_is(Adaptor const& adaptor, cuda_mr& upstream)
{
  EXPECT_TRUE(adaptor.get_upstream_resource() == device_async_resource_ref{upstream})
      << typeid(Adaptor).name();
  static_assert(mr::is_resource_adaptor<Adaptor>);
}

TEST_F(family, EveryAdaptorReturnsItsUpstream)
{
  std::ostringstream log;
  expect_upstream_is(mr::aligned_resource_adaptor<cuda_mr>{&base, 4096}, base);
  expect_upstream_is(
      mr::failure_callback_resource_adaptor<cuda_mr>{
          &base, [](std::size_t, void*) { return false; }, nullptr},
      base);
  expect_upstream_is(mr::limiting_resource_adaptor<cuda_mr>{&base, 1 << 20}, base);
  expect_upstream_is(mr::logging_resource_adaptor<cuda_mr>{&base, log}, base);
  expect_upstream_is(mr::prefetch_resource_adaptor<cuda_mr>{&base, rt}, base);
  expect_upstream_is(mr::statistics_resource_adaptor<cuda_mr>{&base}, base);
  expect_upstream_is(mr::thread_safe_resource_adaptor<cuda_mr>{&base}, base);
  expect_upstream_is(mr::tracking_resource_adaptor<cuda_mr>{&base}, base);
  // owning_wrapper's upstream is the resource it wraps.
  auto owned =
      mr::make_owning_wrapper<mr::statistics_resource_adaptor>(std::make_shared<cuda_mr>(rt));
  EXPECT_TRUE(owned->get_upstream_resource() == device_async_resource_ref{owned->wrapped()});
}

/// Move-assigns `source` (holding one live allocation of 1000 bytes) over `target` (which made
/// one of its own and freed it) and frees the allocation through the target.
template <typename Adaptor>
void move_assign_and_free(Adaptor source, Adaptor target, detail::host_runtime& rt)
{
  target.deallocate(target.allocate(64), 64);
  void* p = source.allocate(1000);
  target  = std::move(source);
  target.deallocate(p, 1000);
  EXPECT_EQ(rt.live_allocations(), 0u) << typeid(Adaptor).name();
}

TEST_F(family, MovableAdaptorsMoveAssignTheirState)
{
  using stats = mr::statistics_resource_adaptor<cuda_mr>;
  stats a{&base};
  stats b{&base};
  void* p = a.allocate(1000);
  b       = std::move(a);
  EXPECT_EQ(b.get_bytes_counter().value, 1000);  // the books moved with the memory
  b.deallocate(p, 1000);
  EXPECT_EQ(b.get_bytes_counter().value, 0);

  using tracking = mr::tracking_resource_adaptor<cuda_mr>;
  tracking t1{&base};
  tracking t2{&base};
  void* q = t1.allocate(300);
  t2      = std::move(t1);
  EXPECT_EQ(t2.get_allocated_bytes(), 300u);
  t2.deallocate(q, 300);
  EXPECT_EQ(t2.get_allocated_bytes(), 0u);

  using limiting = mr::limiting_resource_adaptor<cuda_mr>;
  limiting l1{&base, 1 << 20};
  limiting l2{&base, 1 << 10};
  void* r = l1.allocate(4096);
  l2      = std::move(l1);
  EXPECT_EQ(l2.get_allocation_limit(), std::size_t{1} << 20);
  EXPECT_EQ(l2.get_allocated_bytes(), 4096u);
  l2.deallocate(r, 4096);

  std::ostringstream log1;
  std::ostringstream log2;
  auto never = [](std::size_t, void*) { return false; };
  move_assign_and_free(mr::logging_resource_adaptor<cuda_mr>{&base, log1},
                       mr::logging_resource_adaptor<cuda_mr>{&base, log2}, rt);
  move_assign_and_free(mr::failure_callback_resource_adaptor<cuda_mr>{&base, never, nullptr},
                       mr::failure_callback_resource_adaptor<cuda_mr>{&base, never, nullptr}, rt);
  move_assign_and_free(mr::prefetch_resource_adaptor<cuda_mr>{&base, rt},
                       mr::prefetch_resource_adaptor<cuda_mr>{&base, rt}, rt);
  EXPECT_EQ(rt.live_allocations(), 0u);
}

TEST_F(family, CallbackResourceMoveAssignsItsCallbacks)
{
  int frees_a = 0;
  int frees_b = 0;
  auto alloc  = [this](std::size_t n, cuda_stream_view s, void*) { return base.allocate(n, s); };
  auto free_a = [&, this](void* p, std::size_t n, cuda_stream_view s, void*) {
    ++frees_a;
    base.deallocate(p, n, s);
  };
  auto free_b = [&, this](void* p, std::size_t n, cuda_stream_view s, void*) {
    ++frees_b;
    base.deallocate(p, n, s);
  };
  mr::callback_memory_resource a{alloc, free_a};
  mr::callback_memory_resource b{alloc, free_b};
  void* p = a.allocate(512);
  b       = std::move(a);
  b.deallocate(p, 512);
  EXPECT_EQ(frees_a, 1);  // b now runs a's callbacks
  EXPECT_EQ(frees_b, 0);
  EXPECT_EQ(rt.live_allocations(), 0u);
}

TEST_F(family, AThrowingDeallocateCallbackIsReportedNotFatal)
{
  auto alloc = [this](std::size_t n, cuda_stream_view s, void*) { return base.allocate(n, s); };
  auto bad   = [this](void* p, std::size_t n, cuda_stream_view s, void*) {
    base.deallocate(p, n, s);
    throw std::runtime_error{"callback refused"};
  };
  mr::callback_memory_resource cb{alloc, bad};
  void* p = cb.allocate(256);
  testing::internal::CaptureStderr();
  cb.deallocate(p, 256);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("callback refused"), std::string::npos);
}

/// One allocation through `ref`: stream-ordered for the _async_ aliases, synchronous otherwise
/// (through the calls of detail/cccl_compat.hpp, which name them for the CCCL in use).
template <bool Async, typename Ref>
void round_trip(Ref ref)
{
  if constexpr (Async) {
    void* p = gpumem::detail::async_allocate(ref, 1000, 256, cuda::stream_ref{cudaStream_t{}});
    EXPECT_NE(p, nullptr);
    gpumem::detail::async_deallocate(ref, p, 1000, 256, cuda::stream_ref{cudaStream_t{}});
  } else {
    void* p = gpumem::detail::sync_allocate(ref, 1000, 256);
    EXPECT_NE(p, nullptr);
    gpumem::detail::sync_deallocate(ref, p, 1000, 256);
  }
}

TEST_F(family, AllSixResourceRefAliasesAllocateAndFree)
{
  mr::pinned_memory_resource pinned{rt};
  mr::new_delete_resource host;
  round_trip<false>(device_resource_ref{base});
  round_trip<true>(device_async_resource_ref{base});
  round_trip<false>(host_resource_ref{host});
  round_trip<true>(host_async_resource_ref{pinned});
  round_trip<false>(host_device_resource_ref{pinned});
  round_trip<true>(host_device_async_resource_ref{pinned});
  EXPECT_EQ(rt.live_allocations(), 0u);
}

TEST_F(family, PinnedHostLogicOverTheStandIn)
{
  char const* who = "pinned_host_memory_resource";
  void* p         = detail::pinned_host_allocate(rt, who, 100, 4096);
  EXPECT_TRUE(is_pointer_aligned(p, 4096));
  void* q = detail::pinned_host_allocate(rt, who, 100, 48);  // not a power of two: fallback
  EXPECT_TRUE(is_pointer_aligned(q, alignof(std::max_align_t)));
  detail::pinned_host_deallocate(rt, p, 4096);
  detail::pinned_host_deallocate(rt, q, 48);
  EXPECT_EQ(rt.live_allocations(), 0u);
  rt.fail_next_allocations(1);
  try {
    (void)detail::pinned_host_allocate(rt, who, 1 << 20, 256);
    FAIL() << "no throw";
  } catch (out_of_memory const& e) {
    EXPECT_NE(std::string{e.what()}.find(who), std::string::npos) << e.what();
    EXPECT_NE(std::string{e.what()}.find("1048576"), std::string::npos) << e.what();
  }
  detail::pinned_host_deallocate(rt, detail::pinned_host_allocate(rt, who, 64, 256), 256);
  EXPECT_EQ(rt.live_allocations(), 0u);  // usable after the failure
  mr::pinned_host_memory_resource a;
  mr::pinned_host_memory_resource b;
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a != b);
  EXPECT_EQ(mr::pinned_host_memory_resource::allocate(0), nullptr);
  mr::pinned_host_memory_resource::deallocate_async(nullptr, 0, cuda::stream_ref{cudaStream_t{}});
}

TEST(sam_headroom, advises_the_part_above_the_headroom_to_the_host)
{
  detail::host_runtime rt{{.capacity_bytes = std::size_t{1} << 20}};
  mr::sam_headroom_memory_resource mr{std::size_t{768} << 10, rt};  // 256 KiB usable on the GPU
  std::size_t const bytes = std::size_t{400} << 10;
  void* p                 = mr.allocate(bytes);
  auto const advice       = rt.advice();
  ASSERT_EQ(advice.size(), 2u);
  EXPECT_EQ(advice[0].ptr, p);
  EXPECT_EQ(advice[0].where.device, rt.current_device());
  EXPECT_EQ(advice[1].ptr, static_cast<char*>(p) + advice[0].bytes);
  EXPECT_EQ(advice[1].where.device, detail::mem_location::host);
  EXPECT_EQ(advice[0].bytes + advice[1].bytes, bytes);
  // The GPU part is the free device memory above the headroom (system memory is host memory in
  // the stand-in, so the allocation itself does not lower it).
  EXPECT_EQ(advice[0].bytes, (std::size_t{1} << 20) - (std::size_t{768} << 10));
  mr.deallocate(p, bytes);
  void* small = mr.allocate(1000);  // the GPU part is whole 256-byte pages: 768 + 232 on the host
  ASSERT_EQ(rt.advice().size(), 4u);
  EXPECT_EQ(rt.advice()[2].bytes, 768u);
  EXPECT_EQ(rt.advice()[2].where.device, rt.current_device());
  EXPECT_EQ(rt.advice()[3].bytes, 232u);
  EXPECT_EQ(rt.advice()[3].where.device, detail::mem_location::host);
  mr.deallocate(small, 1000);
}

TEST(sam_headroom, all_on_the_host_when_free_memory_is_below_the_headroom)
{
  detail::host_runtime rt{{.capacity_bytes = std::size_t{1} << 20}};
  mr::sam_headroom_memory_resource mr{std::size_t{2} << 20, rt};
  void* p           = mr.allocate(5000);
  auto const advice = rt.advice();
  ASSERT_EQ(advice.size(), 1u);
  EXPECT_EQ(advice[0].bytes, 5000u);
  EXPECT_EQ(advice[0].where.device, detail::mem_location::host);
  mr.deallocate(p, 5000);
}

TEST(tracking_debug_sink, the_no_argument_log_writes_only_to_a_chosen_sink)
{
  detail::host_runtime rt;
  cuda_mr base{rt};
  mr::tracking_resource_adaptor<cuda_mr> tracker{&base};
  void* p = tracker.allocate(1536);
  testing::internal::CaptureStderr();
  tracker.log_outstanding_allocations();  // no sink: debug level is off
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  std::ostringstream sink;
  tracker.set_debug_sink(&sink);
  EXPECT_EQ(tracker.get_debug_sink(), &sink);
  tracker.log_outstanding_allocations();
  EXPECT_NE(sink.str().find("1536 B"), std::string::npos) << sink.str();
  tracker.deallocate(p, 1536);
  sink.str("");
  tracker.log_outstanding_allocations();  // nothing outstanding: nothing written
  EXPECT_EQ(sink.str(), "");
}

TEST(scoped_current_device, switches_for_the_scope_and_restores)
{
  detail::host_runtime rt{{.device_count = 2}};
  rt.set_device(0);
  {
    detail::scoped_current_device on{1, rt};
    EXPECT_EQ(rt.current_device(), 1);
    {
      detail::scoped_current_device same{1, rt};
      EXPECT_EQ(rt.current_device(), 1);
    }
    EXPECT_EQ(rt.current_device(), 1);
  }
  EXPECT_EQ(rt.current_device(), 0);
  EXPECT_THROW((detail::scoped_current_device{5, rt}), logic_error);
  EXPECT_EQ(rt.current_device(), 0);
}

}  // namespace
}  // namespace gpumem::test
