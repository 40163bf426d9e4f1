// The host stand-in's memcpy_async: real bytes in backed mode, refused for reserved address space
// that is unmapped or mapped without access (as CUDA refuses), injected failures, and the
// contents of a mapping lost once it is unmapped (a new handle reads fresh memory).
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/error.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace gpumem {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

struct host_memcpy : ::testing::Test {
  detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = 64 * MiB}};
  std::size_t const g = rt.vmm_granularity(0);
  void* base          = rt.vmm_reserve(4 * g, g);
  ~host_memcpy() override { rt.vmm_unreserve(base, 4 * g); }
  char* at(std::size_t granule) { return static_cast<char*>(base) + granule * g; }
};

TEST_F(host_memcpy, CopiesRealBytesBetweenHostAndMappedMemory)
{
  auto const h = rt.vmm_create(g, 0, {});
  rt.vmm_map(at(1), g, h);
  rt.vmm_set_access(at(1), g, 0);
  std::vector<char> src(g, 'x');
  std::vector<char> dst(g, 0);
  rt.memcpy_async(at(1), src.data(), g, cudaStreamPerThread);
  rt.memcpy_async(dst.data(), at(1), g, nullptr);
  EXPECT_EQ(dst, src);
  EXPECT_EQ(rt.calls().memcpy, 2U);
  EXPECT_EQ(rt.calls().memcpy_bytes, 2 * g);
  rt.vmm_unmap(at(1), g);
  rt.vmm_release(h);
  rt.check_invariants();
}

TEST_F(host_memcpy, RefusesUnmappedOrInaccessibleReservedMemory)
{
  std::vector<char> buf(g);
  EXPECT_THROW(rt.memcpy_async(buf.data(), at(0), g, nullptr), cuda_error);  // nothing mapped
  auto const h = rt.vmm_create(g, 0, {});
  rt.vmm_map(at(0), g, h);
  EXPECT_THROW(rt.memcpy_async(buf.data(), at(0), g, nullptr), cuda_error);  // no access yet
  rt.vmm_set_access(at(0), g, 0);
  EXPECT_THROW(rt.memcpy_async(at(0), buf.data(), 2 * g, nullptr), cuda_error);  // runs past it
  rt.memcpy_async(at(0), buf.data(), g, nullptr);
  rt.fail_next_copies(1, 1);
  rt.memcpy_async(at(0), buf.data(), g, nullptr);                            // skipped
  EXPECT_THROW(rt.memcpy_async(at(0), buf.data(), g, nullptr), cuda_error);  // injected
  rt.memcpy_async(at(0), buf.data(), g, nullptr);                            // then fine
  rt.vmm_unmap(at(0), g);
  rt.vmm_release(h);
  rt.check_invariants();
}

TEST_F(host_memcpy, UnmappedContentsAreLostANewHandleReadsFreshMemory)
{
  auto h = rt.vmm_create(g, 0, {});
  rt.vmm_map(at(2), g, h);
  rt.vmm_set_access(at(2), g, 0);
  std::memset(at(2), 0x6b, g);
  rt.vmm_unmap(at(2), g);
  rt.vmm_release(h);
  h = rt.vmm_create(g, 0, {});
  rt.vmm_map(at(2), g, h);
  rt.vmm_set_access(at(2), g, 0);
  std::vector<char> got(g, 1);
  rt.memcpy_async(got.data(), at(2), g, nullptr);
  EXPECT_EQ(got, std::vector<char>(g, 0));
  rt.vmm_unmap(at(2), g);
  rt.vmm_release(h);
  rt.check_invariants();
}

}  // namespace
}  // namespace gpumem
