// The per-device registry: initial resource, set/get/reset of pointers and refs, concurrency.
#include <support/backend.hpp>

#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace gpumem::mr {
namespace {

// CCCL's resource_ref equality compares the static type it was built from; the registry builds
// refs from device_memory_resource&, so compare with refs of that type.
device_async_resource_ref base_ref(device_memory_resource& mr)
{
  return device_async_resource_ref{mr};
}

TEST(per_device_resource, initial_resource_is_a_cuda_memory_resource)
{
  auto* initial = get_per_device_resource(cuda_device_id{0});
  ASSERT_NE(initial, nullptr);
  EXPECT_NE(dynamic_cast<cuda_memory_resource*>(initial), nullptr);
  EXPECT_EQ(get_current_device_resource(), initial);
}

TEST(per_device_resource, set_returns_previous_and_null_restores_initial)
{
  auto* initial = get_per_device_resource(cuda_device_id{0});
  detail::host_runtime rt;
  cuda_memory_resource mine{rt};
  EXPECT_EQ(set_per_device_resource(cuda_device_id{0}, &mine), initial);
  EXPECT_EQ(get_per_device_resource(cuda_device_id{0}), &mine);
  EXPECT_TRUE(get_per_device_resource_ref(cuda_device_id{0}) == base_ref(mine));
  EXPECT_EQ(set_per_device_resource(cuda_device_id{0}, nullptr), &mine);
  EXPECT_EQ(get_per_device_resource(cuda_device_id{0}), initial);
}

TEST(per_device_resource, set_current_device_resource_sets_the_current_devices_pointer_and_ref)
{
  auto const device = get_current_cuda_device();
  auto* initial     = get_per_device_resource(device);
  detail::host_runtime rt;
  cuda_memory_resource mine{rt};
  EXPECT_EQ(set_current_device_resource(&mine), initial);
  EXPECT_EQ(get_current_device_resource(), &mine);
  EXPECT_EQ(get_per_device_resource(device), &mine);
  EXPECT_TRUE(get_current_device_resource_ref() == base_ref(mine));
  EXPECT_EQ(set_current_device_resource(nullptr), &mine);  // null restores the initial one
  EXPECT_EQ(get_current_device_resource(), initial);
}

TEST(per_device_resource, devices_are_independent)
{
  detail::host_runtime rt;
  cuda_memory_resource a{rt};
  cuda_memory_resource b{rt};
  set_per_device_resource(cuda_device_id{3}, &a);
  set_per_device_resource(cuda_device_id{4}, &b);
  EXPECT_EQ(get_per_device_resource(cuda_device_id{3}), &a);
  EXPECT_EQ(get_per_device_resource(cuda_device_id{4}), &b);
  set_per_device_resource(cuda_device_id{3}, nullptr);
  set_per_device_resource(cuda_device_id{4}, nullptr);
}

TEST(per_device_resource, ref_family_sets_and_resets)
{
  detail::host_runtime rt;
  cuda_memory_resource mine{rt};
  auto const initial_ref = get_current_device_resource_ref();
  auto const previous    = set_current_device_resource_ref(device_async_resource_ref{mine});
  EXPECT_TRUE(previous == initial_ref);
  EXPECT_TRUE(get_current_device_resource_ref() == device_async_resource_ref{mine});
  void* p = gpumem::detail::async_allocate(get_current_device_resource_ref(), 1024, 256,
                                           cuda::stream_ref{cudaStream_t{}});
  EXPECT_EQ(rt.live_allocations(), 1u);
  gpumem::detail::async_deallocate(get_current_device_resource_ref(), p, 1024, 256,
                                   cuda::stream_ref{cudaStream_t{}});
  EXPECT_TRUE(reset_current_device_resource_ref() == device_async_resource_ref{mine});
  EXPECT_TRUE(get_current_device_resource_ref() == initial_ref);
  set_per_device_resource_ref(cuda_device_id{0}, device_async_resource_ref{mine});
  EXPECT_TRUE(reset_per_device_resource_ref(cuda_device_id{0}) == device_async_resource_ref{mine});
}

TEST(per_device_resource, concurrent_get_and_set_leave_a_valid_state)
{
  detail::host_runtime rt;
  std::vector<std::unique_ptr<cuda_memory_resource>> mrs;
  for (int i = 0; i < 8; ++i) { mrs.push_back(std::make_unique<cuda_memory_resource>(rt)); }
  auto* initial = get_per_device_resource(cuda_device_id{1});
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        set_per_device_resource(cuda_device_id{1}, mrs[(t + i) % 8].get());
        auto* got  = get_per_device_resource(cuda_device_id{1});
        bool known = got == initial;
        for (auto& m : mrs) { known = known || got == m.get(); }
        if (!known) { ++bad; }
        (void)get_per_device_resource_ref(cuda_device_id{1});
        (void)get_current_device_resource();
      }
    });
  }
  for (auto& th : threads) { th.join(); }
  EXPECT_EQ(bad.load(), 0);
  set_per_device_resource(cuda_device_id{1}, nullptr);
  EXPECT_EQ(get_per_device_resource(cuda_device_id{1}), initial);
}

}  // namespace
}  // namespace gpumem::mr
