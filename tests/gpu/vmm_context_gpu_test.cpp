// The virtual-memory calls on a thread that has made no CUDA runtime call: such a thread has no
// current context, and the driver's cuMemSetAccess and cuMemUnmap run 20 to 40 times slower
// there (about 1 ms instead of 20 to 45 us on an H200). vmm_pool's growth and trim make the
// thread's primary context current first. Skips without a GPU.
#include <support/backend.hpp>

#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <gtest/gtest.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <thread>

namespace gpumem {
namespace {

using ctx_get_current_fn = CUresult (*)(CUcontext*);

ctx_get_current_fn ctx_get_current()
{
  void* fn{};
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return reinterpret_cast<ctx_get_current_fn>(fn);
}

TEST(gpu_vmm_context, TheFirstVirtualMemoryCallOnAThreadMakesAContextCurrent)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto const get = ctx_get_current();
  ASSERT_NE(get, nullptr);
  auto& rt               = detail::cuda_runtime();
  auto const granularity = rt.vmm_granularity(0);
  CUcontext before{};
  CUcontext after{};
  std::thread{[&] {
    (void)get(&before);
    auto const h = rt.vmm_create(granularity, 0, {});  // the driver alone: no runtime call
    (void)get(&after);
    rt.vmm_release(h);
  }}.join();
  if (before != nullptr) { GTEST_SKIP() << "this runtime gives new threads a current context"; }
  EXPECT_NE(after, nullptr);
}

TEST(gpu_vmm_context, AGrowthOnAThreadWithNoContextMakesOneCurrent)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto const get = ctx_get_current();
  ASSERT_NE(get, nullptr);
  mr::vmm_pool_memory_resource pool{mr::vmm_pool_options{.reserve_bytes = std::size_t{1} << 30}};
  CUcontext before{};
  CUcontext after{};
  std::thread{[&] {
    (void)get(&before);
    void* p = pool.allocate(std::size_t{4} << 20, cuda_stream_view{});  // maps new memory
    (void)get(&after);
    pool.deallocate(p, std::size_t{4} << 20, cuda_stream_view{});
    (void)pool.trim_to(0);
  }}.join();
  if (before != nullptr) { GTEST_SKIP() << "this runtime gives new threads a current context"; }
  EXPECT_NE(after, nullptr) << "the growth ran its driver calls without a current context";
  EXPECT_EQ(pool.stats().mapped_bytes, 0U);
}

}  // namespace
}  // namespace gpumem
