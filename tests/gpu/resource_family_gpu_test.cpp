// The resource family on a real GPU where the host stand-in cannot stand in: CUDA memory pools
// behind cuda_async(_view), pinned host memory's async forms, sam_headroom's advice, and
// alignments above 256 on real device memory. Skips without a GPU.
#include <support/backend.hpp>

#include <gpumem/detail/runtime.hpp>
#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/cuda_async_view_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/pinned_host_memory_resource.hpp>
#include <gpumem/mr/sam_headroom_memory_resource.hpp>
#include <gpumem/mr/system_memory_resource.hpp>

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstring>
#include <utility>

namespace gpumem {
namespace {

TEST(gpu_family, cuda_async_pool_handle_and_the_views_copies_moves_and_equality)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  mr::cuda_async_memory_resource owner{std::size_t{16} << 20};
  ASSERT_NE(owner.pool_handle(), nullptr);
  EXPECT_EQ(owner.pool_handle(), owner.pool().handle());
  mr::cuda_async_view_memory_resource view = owner.pool_handle();  // implicit, as in RMM
  EXPECT_EQ(view.pool_handle(), owner.pool_handle());
  EXPECT_TRUE(view == owner);
  EXPECT_TRUE(owner == view);
  mr::cuda_async_view_memory_resource copy{view};
  mr::cuda_async_view_memory_resource moved{std::move(copy)};
  EXPECT_EQ(moved.pool_handle(), owner.pool_handle());
  mr::cuda_async_memory_resource other{std::size_t{1} << 20};
  mr::cuda_async_view_memory_resource assigned{other.pool_handle()};
  EXPECT_FALSE(assigned == owner);
  assigned = view;
  EXPECT_TRUE(assigned == owner);
  mr::cuda_async_view_memory_resource move_assigned{other.pool_handle()};
  move_assigned = std::move(moved);
  EXPECT_TRUE(move_assigned == owner);
  void* p = owner.allocate(4096);  // memory of the owner frees through an equal view
  move_assigned.deallocate(p, 4096);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_THROW(mr::cuda_async_view_memory_resource{cudaMemPool_t{}}, logic_error);
}

TEST(gpu_family, pinned_host_async_forms_ignore_the_stream)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  cudaStream_t stream{};
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  using pinned = mr::pinned_host_memory_resource;
  void* a      = pinned::allocate_async(1000, cuda::stream_ref{stream});
  void* b      = pinned::allocate_async(1000, 8192, cuda::stream_ref{stream});
  EXPECT_TRUE(is_pointer_aligned(b, 8192));
  std::memset(a, 1, 1000);
  std::memset(b, 2, 1000);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, b), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  pinned::deallocate_async(a, 1000, cuda::stream_ref{stream});
  pinned::deallocate_async(b, 1000, 8192, cuda::stream_ref{stream});
  EXPECT_THROW((void)pinned::allocate(std::size_t{1} << 60), bad_alloc);
  void* c = pinned::allocate(64);  // usable after the failure
  pinned::deallocate(c, 64);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

int preferred_location_type(void* ptr, std::size_t bytes)
{
  int type = -1;
  EXPECT_EQ(cudaMemRangeGetAttribute(&type, sizeof(type),
                                     cudaMemRangeAttributePreferredLocationType, ptr, bytes),
            cudaSuccess);
  return type;
}

TEST(gpu_family, sam_headroom_prefers_the_gpu_below_the_headroom_and_the_host_above)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  if (!mr::is_system_memory_supported(detail::cuda_runtime(), 0)) {
    GTEST_SKIP() << "device 0 has no pageable memory access (no HMM/ATS)";
  }
  std::size_t free{};
  std::size_t total{};
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  mr::sam_headroom_memory_resource none_kept{0};
  std::size_t const bytes = std::size_t{4} << 20;
  void* p                 = none_kept.allocate(bytes);
  EXPECT_EQ(preferred_location_type(p, bytes), cudaMemLocationTypeDevice);
  none_kept.deallocate(p, bytes);
  mr::sam_headroom_memory_resource all_kept{total};  // no GPU memory may be used
  void* q = all_kept.allocate(bytes);
  EXPECT_EQ(preferred_location_type(q, bytes), cudaMemLocationTypeHost);
  all_kept.deallocate(q, bytes);
}

TEST(gpu_family, alignments_above_256_on_device_memory)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  mr::cuda_memory_resource cuda;
  void* p = cuda.allocate(1000, std::size_t{1} << 16);
  EXPECT_TRUE(is_pointer_aligned(p, std::size_t{1} << 16));
  ASSERT_EQ(cudaMemset(p, 0, 1000), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cuda.deallocate(p, 1000, std::size_t{1} << 16);
}

}  // namespace
}  // namespace gpumem
