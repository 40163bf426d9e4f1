// Leaf resources, the registry and the CUDA runtime seam on a real GPU.
#include <support/backend.hpp>

#include <gpumem/detail/runtime.hpp>
#include <gpumem/gpumem.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace gpumem {
namespace {

TEST(gpu_leaf, cuda_memory_resource_memory_is_device_memory)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  mr::cuda_memory_resource mr;
  auto* p = static_cast<unsigned char*>(mr.allocate(1 << 20));
  ASSERT_EQ(cudaMemset(p, 0x5a, 1 << 20), cudaSuccess);
  std::vector<unsigned char> host(1 << 20);
  ASSERT_EQ(cudaMemcpy(host.data(), p, host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host.front(), 0x5a);
  EXPECT_EQ(host.back(), 0x5a);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, p), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  mr.deallocate(p, 1 << 20);
}

TEST(gpu_leaf, out_of_memory_reports_free_memory)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  mr::cuda_memory_resource mr;
  auto const total = detail::cuda_runtime().memory_info().total_bytes;
  try {
    (void)mr.allocate(total + 1);
    FAIL() << "no throw";
  } catch (out_of_memory const& e) {
    EXPECT_NE(std::string{e.what()}.find(" free of "), std::string::npos) << e.what();
  }
  void* p = mr.allocate(256);
  mr.deallocate(p, 256);
}

TEST(gpu_leaf, managed_and_pinned_memory_are_host_and_device_accessible)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  mr::managed_memory_resource managed;
  auto* m = static_cast<int*>(managed.allocate(4096));
  m[0]    = 42;  // host write to unified memory
  detail::cuda_runtime().prefetch(m, 4096, {0}, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(m[0], 42);
  managed.deallocate(m, 4096);

  auto* h = static_cast<int*>(mr::pinned_host_memory_resource::allocate(4096, 4096));
  EXPECT_TRUE(is_pointer_aligned(h, 4096));
  h[0] = 7;
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, h), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  mr::pinned_host_memory_resource::deallocate(h, 4096, 4096);

  mr::pinned_memory_resource pinned;
  void* q = pinned.allocate(100);
  pinned.deallocate(q, 100);
}

TEST(gpu_leaf, system_memory_where_the_device_supports_it)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  if (!mr::is_system_memory_supported(detail::cuda_runtime(), 0)) {
    EXPECT_THROW(mr::system_memory_resource{}, logic_error);
    GTEST_SKIP() << "device 0 has no pageable memory access (no HMM/ATS); refusal checked";
  }
  mr::system_memory_resource sys;
  auto* p = static_cast<unsigned char*>(sys.allocate(1 << 16));
  ASSERT_EQ(cudaMemset(p, 1, 1 << 16), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(p[100], 1);
  sys.deallocate(p, 1 << 16);
}

TEST(gpu_leaf, registry_gives_each_device_a_working_resource)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  for (int d = 0; d < get_num_cuda_devices(); ++d) {
    ASSERT_EQ(cudaSetDevice(d), cudaSuccess);
    EXPECT_EQ(get_current_cuda_device().value(), d);
    void* p = mr::get_current_device_resource()->allocate(1024);
    mr::get_current_device_resource()->deallocate(p, 1024);
  }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

TEST(gpu_leaf, runtime_events_order_streams)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto& rt = detail::cuda_runtime();
  cudaStream_t a{};
  ASSERT_EQ(cudaStreamCreate(&a), cudaSuccess);
  auto e = rt.event_create();
  rt.event_record(e, a);
  rt.event_synchronize(e);
  EXPECT_TRUE(rt.event_query(e));
  rt.stream_wait_event(cudaStreamPerThread, e);
  rt.stream_synchronize(cudaStreamPerThread);
  rt.event_destroy(e);
  ASSERT_EQ(cudaStreamDestroy(a), cudaSuccess);
}

}  // namespace
}  // namespace gpumem
