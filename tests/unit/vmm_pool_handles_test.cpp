// The physical handles of vmm_pool_memory_resource as NCCL's buffer registration wants them
// (shareable_handles, gpu_direct_rdma), checked through the runtime's description of the handle
// mapped at an address (vmm_allocation_at), as the CUDA driver gives it: the properties each handle
// was made with, and sizes and mapping addresses that are multiples of the granularity.
#include "suballocator_test_helpers.hpp"

#include <gpumem/mr/vmm_pool_memory_resource.hpp>
#include <gpumem/spec/resource_factory.hpp>

#include <utility>
#include <vector>

namespace gpumem::test {
namespace {

using vmm_pool = mr::vmm_pool_memory_resource;

/// Every handle mapped under [p, p + n), in address order, as the runtime describes them.
std::vector<vmm_allocation_info> handles_under(gpumem::runtime& rt, void* p, std::size_t n)
{
  std::vector<vmm_allocation_info> out;
  auto* at        = static_cast<char*>(p);
  auto* const end = at + n;
  while (at < end) {
    out.push_back(rt.vmm_allocation_at(at));
    EXPECT_LE(static_cast<char*>(out.back().base), at);
    at = static_cast<char*>(out.back().base) + out.back().bytes;
  }
  return out;
}

/// Checks that every handle under the blocks has `want` and lies on the granularity.
void expect_handles(gpumem::runtime& rt, std::vector<std::pair<void*, std::size_t>> const& blocks,
                    vmm_handle_properties want, std::size_t granularity)
{
  for (auto const& [p, n] : blocks) {
    for (auto const& h : handles_under(rt, p, n)) {
      EXPECT_EQ(h.properties.shareable, want.shareable) << "handle at " << h.base;
      EXPECT_EQ(h.properties.gpu_direct_rdma, want.gpu_direct_rdma) << "handle at " << h.base;
      EXPECT_EQ(h.device, 0);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(h.base) % granularity, 0U) << h.base;
      EXPECT_EQ(h.bytes % granularity, 0U) << h.bytes;
      EXPECT_GT(h.bytes, 0U);
    }
  }
}

struct vmm_handles_test : ::testing::Test {
  detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = 256 * MiB}};
  std::size_t const granule = rt.vmm_granularity(0);

  /// Several growths (handles of up to 4 MiB, runs of several handles), some memory freed.
  std::vector<std::pair<void*, std::size_t>> fill(vmm_pool& pool)
  {
    std::vector<std::pair<void*, std::size_t>> live;
    for (std::size_t n : {3 * MiB, 9 * MiB, MiB, 13 * MiB, 5 * MiB}) {
      live.emplace_back(pool.allocate(n), n);
    }
    return live;
  }
};

TEST_F(vmm_handles_test, PlainPoolHandlesAreNeitherShareableNorRdma)
{
  vmm_pool pool{{.reserve_bytes = 128 * MiB, .handle_bytes = 4 * MiB}, rt};
  auto live = fill(pool);
  expect_handles(rt, live, {}, granule);
  for (auto const& [p, n] : live) { pool.deallocate(p, n); }
}

TEST_F(vmm_handles_test, NcclHandlesAreShareableAndRdmaCapableWhereSupported)
{
  mr::vmm_pool_options o{.reserve_bytes = 128 * MiB, .handle_bytes = 4 * MiB};
  o.shareable_handles = true;
  o.gpu_direct_rdma   = true;
  vmm_pool pool{o, rt};
  auto live = fill(pool);
  vmm_handle_properties const want{.shareable = true, .gpu_direct_rdma = true};
  expect_handles(rt, live, want, granule);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(pool.reserved_range().first) % granule, 0U);
  // Memory moved out of a hole (a freed block's handles mapped elsewhere) keeps its properties,
  // and so does memory mapped again by resume().
  pool.deallocate(live[1].first, live[1].second);
  live.erase(live.begin() + 1);
  live.emplace_back(pool.allocate(40 * MiB), 40 * MiB);
  expect_handles(rt, live, want, granule);
  ASSERT_TRUE(pool.pause(pause_mode::discard));
  ASSERT_TRUE(pool.resume());
  expect_handles(rt, live, want, granule);
  // A single-handle allocation: one handle, exactly its rounded size, the same properties.
  void* single   = pool.allocate_single_handle(3 * MiB);
  auto const one = handles_under(rt, single, 3 * MiB);
  ASSERT_EQ(one.size(), 1U);
  EXPECT_EQ(one[0].base, single);
  EXPECT_EQ(one[0].bytes, 4 * MiB);
  EXPECT_EQ(one[0].properties, want);
  pool.deallocate(single, 3 * MiB);
  for (auto const& [p, n] : live) { pool.deallocate(p, n); }
  pool.check_invariants();
  rt.check_invariants();
}

TEST_F(vmm_handles_test, RdmaIsLeftOutOnADeviceWithoutIt)
{
  detail::host_runtime plain{{.capacity_bytes = 64 * MiB, .vmm_gpu_direct_rdma = false}};
  EXPECT_FALSE(plain.vmm_gpu_direct_rdma_supported(0));
  // Asked of the runtime directly, the driver refuses, naming the attribute.
  try {
    (void)plain.vmm_create(2 * MiB, 0, {.gpu_direct_rdma = true});
    ADD_FAILURE() << "an RDMA-capable handle was made on a device without support";
  } catch (cuda_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED"),
              std::string::npos)
        << e.what();
  }
  // The pool asks for the flag only where the device has it: shareable still, RDMA not.
  mr::vmm_pool_options o{.reserve_bytes = 64 * MiB};
  o.shareable_handles = true;
  o.gpu_direct_rdma   = true;
  vmm_pool pool{o, plain};
  void* p = pool.allocate(5 * MiB);
  expect_handles(plain, {{p, 5 * MiB}}, {.shareable = true}, plain.vmm_granularity(0));
  void* single = pool.allocate_single_handle(MiB);
  EXPECT_EQ(plain.vmm_allocation_at(single).properties, (vmm_handle_properties{.shareable = true}));
  pool.deallocate(single, MiB);
  pool.deallocate(p, 5 * MiB);
  plain.check_invariants();
}

TEST_F(vmm_handles_test, NothingMappedThereIsAnError)
{
  vmm_pool pool{{.reserve_bytes = 64 * MiB}, rt};
  EXPECT_THROW((void)rt.vmm_allocation_at(pool.reserved_range().first), cuda_error);
  void* p         = pool.allocate(MiB);
  auto const info = rt.vmm_allocation_at(static_cast<char*>(p) + 12345);
  EXPECT_LE(info.base, p);
  EXPECT_GT(static_cast<char*>(info.base) + info.bytes, static_cast<char*>(p) + MiB - 1);
  pool.deallocate(p, MiB);
  pool.trim();
  EXPECT_THROW((void)rt.vmm_allocation_at(p), cuda_error);
}

TEST_F(vmm_handles_test, TheSpecKeysSetTheOptions)
{
  auto stack    = spec::build("vmm_pool:reserve=64MiB,shareable=1,rdma=1", rt, true);
  auto const& o = dynamic_cast<vmm_pool const&>(stack.top()).options();
  EXPECT_TRUE(o.shareable_handles);
  EXPECT_TRUE(o.gpu_direct_rdma);
  void* p = stack.top().allocate(MiB);
  EXPECT_EQ(rt.vmm_allocation_at(p).properties,
            (vmm_handle_properties{.shareable = true, .gpu_direct_rdma = true}));
  stack.top().deallocate(p, MiB);
  EXPECT_THROW((void)spec::build("vmm_pool:shareable=maybe", rt, true), spec::spec_error);
}

}  // namespace
}  // namespace gpumem::test
