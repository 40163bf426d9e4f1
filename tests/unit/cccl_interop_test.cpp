// gpumem resources through CCCL's cuda::mr types, on whatever CCCL the build uses: the resource-ref
// aliases, the member names of CCCL 3.1 and newer (present on every version), and — where CCCL has
// them (3.2 and newer) — any_resource, shared_resource and the cuda::buffer container.
#include "suballocator_test_helpers.hpp"

#include <gpumem/mr/new_delete_resource.hpp>
#include <gpumem/mr/pinned_host_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/resource_ref.hpp>

#include <type_traits>

#if CCCL_VERSION >= 3004000
#include <cuda/buffer>
#endif

namespace gpumem::test {
namespace {

using pool_mr = mr::pool_memory_resource<mr::cuda_memory_resource>;

// The aliases keep their meaning on every version: `_async_` refs are stream-ordered.
static_assert(std::is_constructible_v<device_async_resource_ref, pool_mr&>);
static_assert(std::is_constructible_v<device_resource_ref, pool_mr&>);
static_assert(std::is_constructible_v<host_resource_ref, mr::new_delete_resource&>);
static_assert(!std::is_constructible_v<host_async_resource_ref, mr::new_delete_resource&>);
static_assert(!std::is_constructible_v<device_resource_ref, mr::new_delete_resource&>);
static_assert(
    std::is_constructible_v<host_device_async_resource_ref, mr::pinned_host_memory_resource&>);
static_assert(!std::is_constructible_v<host_device_async_resource_ref, pool_mr&>);

struct cccl_interop : ::testing::Test {
  host_upstream up;
  cudaStream_t a = up.rt.create_stream();
  pool_mr pool{&up.cuda, MiB, std::nullopt, up.rt};
};

TEST_F(cccl_interop, StreamFirstMembersAllocateFromTheResource)
{
  void* p = pool.allocate(cuda::stream_ref{a}, 1000, 256);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0U);
  pool.deallocate(cuda::stream_ref{a}, p, 1000, 256);
  // Freed on `a`, so reusable on `a` at once: the same block comes back.
  void* q = pool.allocate_async(1000, 256, cuda_stream_view{a});
  EXPECT_EQ(q, p);
  pool.deallocate_async(q, 1000, 256, cuda_stream_view{a});
  EXPECT_EQ(up.rt.live_allocations(), 1U);  // only the pool's initial chunk
}

TEST_F(cccl_interop, SyncMembersUseTheDefaultStreamAndCheckAlignment)
{
  void* p = pool.allocate_sync(300, 128);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 128, 0U);
  pool.deallocate_sync(p, 300, 128);
  EXPECT_EQ(pool.allocate(300), p);  // back in the default stream's free list
  pool.deallocate(p, 300);
  EXPECT_THROW((void)pool.allocate_sync(64, 3), gpumem::logic_error);
  void* r = pool.allocate_sync(64, 64);  // still usable after the failed call
  pool.deallocate_sync(r, 64, 64);
}

TEST_F(cccl_interop, AsyncRefReachesTheResourceOnTheGivenStream)
{
  device_async_resource_ref ref{pool};
  void* p = detail::async_allocate(ref, 512, 256, cuda::stream_ref{a});
  detail::async_deallocate(ref, p, 512, 256, cuda::stream_ref{a});
  EXPECT_EQ(pool.allocate(512, cuda_stream_view{a}), p);
  pool.deallocate(p, 512, cuda_stream_view{a});
  device_resource_ref sync_ref{pool};
  void* q = detail::sync_allocate(sync_ref, 512, 256);
  EXPECT_NE(q, nullptr);
  detail::sync_deallocate(sync_ref, q, 512, 256);
}

#if GPUMEM_CCCL_HAS_ANY_RESOURCE

TEST_F(cccl_interop, AnyResourceHoldsACopyableResource)
{
  cuda::mr::any_resource<cuda::mr::device_accessible> any{up.cuda};
  void* p = any.allocate(cuda::stream_ref{a}, 4096, 256);
  EXPECT_EQ(up.rt.live_allocations(), 2U);  // the pool's chunk and this one
  any.deallocate(cuda::stream_ref{a}, p, 4096, 256);
  EXPECT_EQ(up.rt.live_allocations(), 1U);
}

TEST_F(cccl_interop, SharedResourceSharesOnePool)
{
  auto shared = cuda::mr::make_shared_resource<pool_mr>(&up.cuda, MiB, std::nullopt, up.rt);
  EXPECT_EQ(up.rt.live_allocations(), 2U);  // the fixture's pool chunk and this pool's
  cuda::mr::any_resource<cuda::mr::device_accessible> any{shared};
  auto copy = any;  // copies share the one pool
  void* p   = any.allocate(cuda::stream_ref{a}, 2048, 256);
  any.deallocate(cuda::stream_ref{a}, p, 2048, 256);
  EXPECT_EQ(copy.allocate(cuda::stream_ref{a}, 2048, 256), p);
  copy.deallocate(cuda::stream_ref{a}, p, 2048, 256);
  EXPECT_EQ(up.rt.live_allocations(), 2U);  // served from the pool, never from upstream
}

TEST_F(cccl_interop, RefsGoIntoAnyResourceAndCompareByResource)
{
  device_async_resource_ref ref{pool};
  cuda::mr::any_resource<cuda::mr::device_accessible> any{ref};
  void* p = any.allocate(cuda::stream_ref{a}, 700, 256);
  any.deallocate(cuda::stream_ref{a}, p, 700, 256);
  EXPECT_EQ(pool.allocate(700, cuda_stream_view{a}), p);  // it reached `pool`
  pool.deallocate(p, 700, cuda_stream_view{a});
  EXPECT_TRUE(ref == device_async_resource_ref{pool});
  pool_mr other{&up.cuda, 0, std::nullopt, up.rt};
  EXPECT_FALSE(ref == device_async_resource_ref{other});
}

#if CCCL_VERSION >= 3004000  // cuda::buffer compiles with a host compiler from CCCL 3.4 on

TEST_F(cccl_interop, CcclBufferAllocatesFromAPool)
{
  auto const before = up.rt.live_allocations();
  void* data        = nullptr;
  {
    cuda::buffer<int, cuda::mr::device_accessible> buf{
        cuda::stream_ref{a}, device_async_resource_ref{pool}, 1000, cuda::no_init};
    EXPECT_EQ(buf.size(), 1000U);
    data = buf.data();
    EXPECT_NE(data, nullptr);
    EXPECT_EQ(up.rt.live_allocations(), before);  // served from the pool's chunk
  }
  void* p = pool.allocate(4000, cuda_stream_view{a});  // the buffer gave its block back on `a`
  EXPECT_EQ(p, data);
  pool.deallocate(p, 4000, cuda_stream_view{a});
}

#endif

#else

TEST(cccl_interop_versions, AnyResourceNeedsCccl32)
{
  GTEST_SKIP() << "this CCCL (" << CCCL_MAJOR_VERSION << "." << CCCL_MINOR_VERSION
               << ") has no cuda::mr::any_resource; built against CCCL 3.2 or newer, this test "
                  "holds gpumem resources in any_resource, shared_resource and cuda::buffer";
}

#endif

}  // namespace
}  // namespace gpumem::test
