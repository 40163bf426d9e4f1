// The host_memory_resource base and the parts of the resource family that porting relies on:
// a host resource written to RMM's documented interface (do_deallocate without noexcept) compiles
// and works; deallocate never throws; the default do_is_equal; copy and move of the leaf, host and
// arena resources; the callback resource's move; the pinned resources' bad_alloc for failures
// other than exhaustion; and the constants and typedefs RMM documents.
#include <gpumem/align.hpp>
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/detail/pinned_host.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/arena_memory_resource.hpp>
#include <gpumem/mr/callback_memory_resource.hpp>
#include <gpumem/mr/cuda_async_view_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/host_memory_resource.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/mr/new_delete_resource.hpp>
#include <gpumem/mr/owning_wrapper.hpp>
#include <gpumem/mr/pinned_host_memory_resource.hpp>
#include <gpumem/mr/pinned_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/statistics_resource_adaptor.hpp>
#include <gpumem/mr/system_memory_resource.hpp>
#include <gpumem/mr/thread_safe_resource_adaptor.hpp>
#include <gpumem/mr/tracking_resource_adaptor.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace gpumem {
namespace {

// -- a host resource written the way RMM's documentation writes one -----------------------------

/// Exactly the documented interface: no noexcept on do_deallocate, no do_is_equal override.
class seed_style_host_resource : public mr::host_memory_resource {
 public:
  int allocations{};
  int deallocations{};
  bool throw_on_deallocate{false};
  void* not_freed{};

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override
  {
    ++allocations;
    return std::aligned_alloc(alignment, align_up(bytes, alignment));
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override
  {
    (void)bytes;
    (void)alignment;
    ++deallocations;
    if (throw_on_deallocate) {
      not_freed = p;  // the test frees it
      throw std::runtime_error{"RMM-style free failed"};
    }
    std::free(p);
  }
};

static_assert(!std::is_abstract_v<seed_style_host_resource>);
static_assert(noexcept(std::declval<mr::host_memory_resource&>().deallocate(nullptr, 0, 8)));
static_assert(noexcept(std::declval<mr::host_memory_resource&>().deallocate_sync(nullptr, 0, 8)));

TEST(host_memory_resource, a_seed_style_resource_compiles_and_round_trips)
{
  seed_style_host_resource r;
  void* p = r.allocate(100, 64);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(is_pointer_aligned(p, 64));
  r.deallocate(p, 100, 64);
  EXPECT_EQ(r.allocations, 1);
  EXPECT_EQ(r.deallocations, 1);
  // Through the base and through a resource ref.
  mr::host_memory_resource& base = r;
  base.deallocate(base.allocate(8), 8);
  host_resource_ref ref{r};
  detail::sync_deallocate(ref, detail::sync_allocate(ref, 16, 16), 16, 16);  // any CCCL
  EXPECT_EQ(r.allocations, 3);
  EXPECT_EQ(r.deallocations, 3);
}

TEST(host_memory_resource, a_throwing_do_deallocate_is_reported_not_propagated)
{
  seed_style_host_resource r;
  void* p               = r.allocate(32);
  r.throw_on_deallocate = true;
  testing::internal::CaptureStderr();
  EXPECT_NO_THROW(r.deallocate(p, 32));
  auto const err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("gpumem: deallocate("), std::string::npos) << err;
  EXPECT_NE(err.find("RMM-style free failed"), std::string::npos) << err;
  EXPECT_EQ(r.deallocations, 1);
  EXPECT_EQ(r.not_freed, p);
  std::free(r.not_freed);
}

TEST(host_memory_resource, default_is_equal_is_identity_and_not_equal_is_its_negation)
{
  seed_style_host_resource a;
  seed_style_host_resource b;
  EXPECT_TRUE(a.is_equal(a));
  EXPECT_FALSE(a.is_equal(b));
  EXPECT_TRUE(a == a);
  EXPECT_FALSE(a == b);
  EXPECT_FALSE(a != a);
  EXPECT_TRUE(a != b);
  // Resources that override do_is_equal: every new_delete_resource is equal to the others and
  // unequal to an unrelated resource, whichever side asks.
  mr::new_delete_resource n1;
  mr::new_delete_resource n2;
  EXPECT_TRUE(n1.is_equal(n2));
  EXPECT_FALSE(n1 != n2);
  EXPECT_TRUE(n1 != a);
  EXPECT_TRUE(a != n1);
}

TEST(host_memory_resource, pinned_resources_equal_over_the_same_runtime_only)
{
  detail::host_runtime rt1;
  detail::host_runtime rt2;
  mr::pinned_memory_resource a{rt1};
  mr::pinned_memory_resource b{rt1};
  mr::pinned_memory_resource c{rt2};
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a != b);
  EXPECT_TRUE(a != c);
  mr::new_delete_resource n;
  EXPECT_TRUE(a != n);
}

// -- the default host alignment, the pool's alignment, the lock typedefs ----------------------

static_assert(RMM_DEFAULT_HOST_ALIGNMENT == alignof(std::max_align_t));
static_assert(mr::pool_memory_resource<mr::cuda_memory_resource>::allocation_alignment == 256);
static_assert(mr::pool_memory_resource<mr::cuda_memory_resource>::allocation_alignment ==
              CUDA_ALLOCATION_ALIGNMENT);
static_assert(std::is_same_v<mr::statistics_resource_adaptor<mr::cuda_memory_resource>::read_lock_t,
                             std::shared_lock<std::shared_mutex>>);
static_assert(
    std::is_same_v<mr::statistics_resource_adaptor<mr::cuda_memory_resource>::write_lock_t,
                   std::unique_lock<std::shared_mutex>>);
static_assert(std::is_same_v<mr::tracking_resource_adaptor<mr::cuda_memory_resource>::read_lock_t,
                             std::shared_lock<std::shared_mutex>>);
static_assert(std::is_same_v<mr::tracking_resource_adaptor<mr::cuda_memory_resource>::write_lock_t,
                             std::unique_lock<std::shared_mutex>>);
static_assert(std::is_same_v<mr::thread_safe_resource_adaptor<mr::cuda_memory_resource>::lock_t,
                             std::lock_guard<std::mutex>>);

TEST(host_memory_resource, the_default_host_alignment_is_what_allocate_uses)
{
  seed_style_host_resource r;
  void* p = r.allocate(1);  // default alignment
  EXPECT_TRUE(is_pointer_aligned(p, RMM_DEFAULT_HOST_ALIGNMENT));
  r.deallocate(p, 1);
  void* q = r.allocate(1, 48);  // not a power of two: the default host alignment
  EXPECT_TRUE(is_pointer_aligned(q, RMM_DEFAULT_HOST_ALIGNMENT));
  r.deallocate(q, 1, 48);
}

TEST(host_memory_resource, pool_sizes_round_up_to_allocation_alignment)
{
  detail::host_runtime rt;
  mr::cuda_memory_resource cuda{rt};
  using pool_t = mr::pool_memory_resource<mr::cuda_memory_resource>;
  pool_t pool{&cuda, std::size_t{1} << 20, std::size_t{1} << 20, rt};
  void* a = pool.allocate(1);
  void* b = pool.allocate(1);
  // Two one-byte blocks in one chunk lie allocation_alignment apart (neither size is the request).
  auto const gap = static_cast<char*>(b) > static_cast<char*>(a)
                       ? static_cast<char*>(b) - static_cast<char*>(a)
                       : static_cast<char*>(a) - static_cast<char*>(b);
  EXPECT_EQ(static_cast<std::size_t>(gap), pool_t::allocation_alignment);
  pool.deallocate(a, 1);
  pool.deallocate(b, 1);
}

// -- copy and move -----------------------------------------------------------------------------

template <class T>
constexpr bool copyable_and_movable = std::is_copy_constructible_v<T>&&
    std::is_copy_assignable_v<T>&& std::is_move_constructible_v<T>&& std::is_move_assignable_v<T>;

template <class T>
constexpr bool neither_copyable_nor_movable =
    !std::is_copy_constructible_v<T> && !std::is_copy_assignable_v<T> &&
    !std::is_move_constructible_v<T> && !std::is_move_assignable_v<T>;

// RMM declares these copy and move operations defaulted.
static_assert(copyable_and_movable<mr::cuda_memory_resource>);
static_assert(copyable_and_movable<mr::managed_memory_resource>);
static_assert(copyable_and_movable<mr::system_memory_resource>);
static_assert(copyable_and_movable<mr::new_delete_resource>);
static_assert(copyable_and_movable<mr::pinned_memory_resource>);
static_assert(copyable_and_movable<mr::pinned_host_memory_resource>);
static_assert(copyable_and_movable<mr::cuda_async_view_memory_resource>);
static_assert(std::is_nothrow_move_constructible_v<mr::host_memory_resource> ||
              std::is_abstract_v<mr::host_memory_resource>);
// The arena owns its superblocks and per-thread arenas: neither copied nor moved.
static_assert(neither_copyable_nor_movable<mr::arena_memory_resource<mr::cuda_memory_resource>>);
// The callback resource is move-only; the owning wrapper neither.
static_assert(!std::is_copy_constructible_v<mr::callback_memory_resource>);
static_assert(!std::is_copy_assignable_v<mr::callback_memory_resource>);
static_assert(std::is_nothrow_move_constructible_v<mr::callback_memory_resource>);
static_assert(std::is_nothrow_move_assignable_v<mr::callback_memory_resource>);
static_assert(
    !std::is_copy_constructible_v<mr::owning_wrapper<
        mr::statistics_resource_adaptor<mr::cuda_memory_resource>, mr::cuda_memory_resource>>);

TEST(resource_copies, a_copied_leaf_or_host_resource_frees_the_original_memory)
{
  detail::host_runtime rt;
  mr::cuda_memory_resource cuda{rt};
  void* p                        = cuda.allocate(256);
  mr::cuda_memory_resource copy  = cuda;
  mr::cuda_memory_resource moved = std::move(copy);
  EXPECT_TRUE(moved == cuda);
  moved.deallocate(p, 256);
  mr::pinned_memory_resource pinned{rt};
  void* h                          = pinned.allocate(64);
  mr::pinned_memory_resource other = pinned;
  mr::pinned_memory_resource last{rt};
  last = std::move(other);
  EXPECT_TRUE(last == pinned);
  last.deallocate(h, 64);
  EXPECT_EQ(rt.live_allocations(), 0u);
}

TEST(callback_memory_resource, the_moved_to_resource_calls_the_callbacks_with_their_arguments)
{
  detail::host_runtime rt;
  mr::cuda_memory_resource cuda{rt};
  int alloc_tag{};
  int free_tag{};
  int allocs{};
  int frees{};
  auto alloc = [&](std::size_t bytes, cuda_stream_view stream, void* arg) {
    EXPECT_EQ(arg, &alloc_tag);
    ++allocs;
    return cuda.allocate(bytes, stream);
  };
  auto free = [&](void* p, std::size_t bytes, cuda_stream_view stream, void* arg) {
    EXPECT_EQ(arg, &free_tag);
    ++frees;
    cuda.deallocate(p, bytes, stream);
  };
  mr::callback_memory_resource original{alloc, free, &alloc_tag, &free_tag};
  mr::callback_memory_resource moved{std::move(original)};
  void* p = moved.allocate(512);
  moved.deallocate(p, 512);
  EXPECT_EQ(allocs, 1);
  EXPECT_EQ(frees, 1);
  mr::callback_memory_resource assigned{nullptr, nullptr};
  assigned = std::move(moved);
  assigned.deallocate(assigned.allocate(64), 64);
  EXPECT_EQ(allocs, 2);
  EXPECT_EQ(frees, 2);
  EXPECT_EQ(rt.live_allocations(), 0u);
}

// -- owning_wrapper::wrapped() const ------------------------------------------------------------

TEST(owning_wrapper, wrapped_through_a_const_reference_is_the_same_const_resource)
{
  detail::host_runtime rt;
  auto cuda            = std::make_shared<mr::cuda_memory_resource>(rt);
  auto wrapper         = mr::make_owning_wrapper<mr::statistics_resource_adaptor>(cuda);
  auto const& as_const = *wrapper;
  static_assert(std::is_same_v<decltype(as_const.wrapped()),
                               mr::statistics_resource_adaptor<mr::cuda_memory_resource> const&>);
  static_assert(noexcept(as_const.wrapped()));
  EXPECT_EQ(&as_const.wrapped(), &wrapper->wrapped());
  void* p = wrapper->allocate(1000);
  EXPECT_EQ(as_const.wrapped().get_bytes_counter().value, 1000);
  wrapper->deallocate(p, 1000);
  EXPECT_EQ(as_const.wrapped().get_bytes_counter().value, 0);
}

// -- the pinned resources: bad_alloc for failures other than exhaustion -------------------------

TEST(pinned_resources, a_failure_other_than_out_of_memory_is_bad_alloc_naming_the_error)
{
  detail::host_runtime rt;
  mr::pinned_memory_resource pinned{rt};
  rt.fail_next_allocations(1, cudaErrorInvalidValue);
  try {
    (void)pinned.allocate(4096);
    FAIL() << "no throw";
  } catch (out_of_memory const& e) {
    FAIL() << "an invalid-value failure reported as out of memory: " << e.what();
  } catch (bad_alloc const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find("pinned_memory_resource"), std::string::npos) << what;
    EXPECT_NE(what.find("cudaErrorInvalidValue"), std::string::npos) << what;
    EXPECT_NE(what.find("4096"), std::string::npos) << what;
  }
  // The same path as pinned_host_memory_resource (whose members are static over CUDA).
  rt.fail_next_allocations(1, cudaErrorInvalidValue);
  EXPECT_THROW(
      {
        try {
          (void)detail::pinned_host_allocate(rt, "pinned_host_memory_resource", 64, 256);
        } catch (out_of_memory const&) {
          FAIL() << "reported as out of memory";
        }
      },
      bad_alloc);
  // Exhaustion is still out_of_memory, and the resource stays usable.
  rt.fail_next_allocations(1);
  EXPECT_THROW((void)pinned.allocate(64), out_of_memory);
  pinned.deallocate(pinned.allocate(64), 64);
  EXPECT_EQ(rt.live_allocations(), 0u);
}

}  // namespace
}  // namespace gpumem
