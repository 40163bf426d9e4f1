// The host stand-in's model of CUDA's virtual-memory API: what it accepts, the errors CUDA gives
// for misuse, capacity shared with allocations, access that must be granted, real host address
// space when backed.
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/error.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <unistd.h>

namespace gpumem::detail {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

struct host_vmm : ::testing::TestWithParam<bool> {  // param: backed
  host_runtime rt{host_runtime_options{.capacity_bytes = 16 * MiB, .backed = GetParam()}};
  char* base = static_cast<char*>(rt.vmm_reserve(64 * MiB, 0));
  void TearDown() override
  {
    rt.vmm_unreserve(base, 64 * MiB);
    EXPECT_NO_THROW(rt.check_invariants());
  }
};

TEST_P(host_vmm, MapsGrantsAccessAndGivesMemoryBack)
{
  EXPECT_EQ(rt.vmm_granularity(0), 2 * MiB);
  auto h = rt.vmm_create(4 * MiB, 0, {});
  EXPECT_EQ(rt.used_bytes(), 4 * MiB);  // physical memory counts against the device
  rt.vmm_map(base + 2 * MiB, 4 * MiB, h);
  EXPECT_THROW(rt.vmm_check_mapped(base + 2 * MiB, MiB), cuda_error) << "no access granted yet";
  rt.vmm_set_access(base + 2 * MiB, 4 * MiB, 0);
  rt.vmm_check_mapped(base + 2 * MiB, 4 * MiB);
  if (GetParam()) { std::memset(base + 2 * MiB, 1, 4 * MiB); }  // real memory once accessible
  rt.vmm_release(h);  // still mapped: freed with the mapping
  EXPECT_EQ(rt.used_bytes(), 4 * MiB);
  rt.vmm_unmap(base + 2 * MiB, 4 * MiB);
  EXPECT_EQ(rt.used_bytes(), 0U);
  EXPECT_EQ(rt.vmm_state().handles, 0U);
}

TEST_P(host_vmm, MisuseGetsCudasErrors)
{
  // A runtime of its own: it sees misuse on purpose, which its invariants then report.
  host_runtime bad{host_runtime_options{.capacity_bytes = 16 * MiB, .backed = GetParam()}};
  char* base = static_cast<char*>(bad.vmm_reserve(64 * MiB, 0));
  EXPECT_THROW((void)bad.vmm_reserve(3 * MiB + 1, 0), cuda_error);     // not granular
  EXPECT_THROW((void)bad.vmm_create(MiB, 0, {}), cuda_error);          // not granular
  EXPECT_THROW((void)bad.vmm_create(2 * MiB, 5, {}), cuda_error);      // no such device
  EXPECT_THROW((void)bad.vmm_create(18 * MiB, 0, {}), out_of_memory);  // beyond the device
  auto h = bad.vmm_create(2 * MiB, 0, {});
  EXPECT_THROW(bad.vmm_map(base + MiB, 2 * MiB, h), cuda_error);       // unaligned
  EXPECT_THROW(bad.vmm_map(base, 4 * MiB, h), cuda_error);             // not the handle's size
  EXPECT_THROW(bad.vmm_map(base + 63 * MiB, 2 * MiB, h), cuda_error);  // past the reservation
  EXPECT_THROW(bad.vmm_map(reinterpret_cast<char*>(4096), 2 * MiB, h), cuda_error);
  bad.vmm_map(base, 2 * MiB, h);
  auto g = bad.vmm_create(2 * MiB, 0, {});
  EXPECT_THROW(bad.vmm_map(base, 2 * MiB, g), cuda_error);         // over a mapping
  EXPECT_THROW(bad.vmm_set_access(base, 4 * MiB, 0), cuda_error);  // partly unmapped
  EXPECT_THROW((void)bad.vmm_export_fd(h), cuda_error);            // not shareable
  bad.vmm_unmap(base, MiB);  // not a whole mapping: recorded, as CUDA refuses it
  EXPECT_EQ(bad.vmm_state().misuse_count, 1U);
  EXPECT_THROW(bad.check_invariants(), logic_error);
  bad.vmm_unmap(base, 2 * MiB);
  bad.vmm_release(h);
  bad.vmm_release(h);  // twice
  bad.vmm_release(g);
  EXPECT_EQ(bad.vmm_state().misuse_count, 2U);
  bad.fail_next_allocations(1);
  EXPECT_THROW((void)bad.vmm_create(2 * MiB, 0, {}), out_of_memory);
  bad.fail_next_maps(1);
  auto k = bad.vmm_create(2 * MiB, 0, {});
  EXPECT_THROW(bad.vmm_map(base, 2 * MiB, k), cuda_error);
  bad.vmm_release(k);
  EXPECT_EQ(bad.used_bytes(), 0U);
  bad.vmm_unreserve(base, 64 * MiB);
}

TEST_P(host_vmm, UnreservingAMappedRangeIsMisuseAndShareableHandlesExport)
{
  auto h = rt.vmm_create(2 * MiB, 0, {.shareable = true});
  rt.vmm_map(base, 2 * MiB, h);
  int const fd = rt.vmm_export_fd(h);
  EXPECT_GE(fd, 0);
  ::close(fd);
  auto const state = rt.vmm_state();
  EXPECT_EQ(state.reservations, 1U);
  EXPECT_EQ(state.mappings, 1U);
  rt.vmm_unmap(base, 2 * MiB);
  rt.vmm_release(h);
  host_runtime other{host_runtime_options{.backed = GetParam()}};
  auto* b2 = static_cast<char*>(other.vmm_reserve(4 * MiB, 0));
  auto g   = other.vmm_create(2 * MiB, 0, {});
  other.vmm_map(b2, 2 * MiB, g);
  other.vmm_unreserve(b2, 4 * MiB);  // still mapped: refused
  EXPECT_EQ(other.vmm_state().misuse_count, 1U);
  other.vmm_unmap(b2, 2 * MiB);
  other.vmm_release(g);
  other.vmm_unreserve(b2, 4 * MiB);
  EXPECT_EQ(other.vmm_state().reservations, 0U);
}

TEST(host_vmm_support, ADeviceWithoutVirtualMemoryManagementSaysSo)
{
  host_runtime rt{host_runtime_options{.vmm_supported = false}};
  try {
    (void)rt.vmm_granularity(0);
    ADD_FAILURE() << "no error";
  } catch (cuda_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED"), std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(model, host_vmm, ::testing::Values(true, false),
                         [](auto const& info) { return info.param ? "backed" : "simulated"; });

}  // namespace
}  // namespace gpumem::detail
