// White-box tests of the leaf and host resources over the host stand-in.
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/is_resource_adaptor.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/mr/new_delete_resource.hpp>
#include <gpumem/mr/pinned_memory_resource.hpp>
#include <gpumem/mr/sam_headroom_memory_resource.hpp>

#include <gtest/gtest.h>

#include <cstring>

namespace gpumem::mr {
namespace {

TEST(cuda_memory_resource, out_of_memory_says_what_was_asked_and_what_is_free)
{
  detail::host_runtime rt{{.capacity_bytes = 1 << 20}};
  cuda_memory_resource mr{rt};
  try {
    (void)mr.allocate(2 << 20);
    FAIL() << "no throw";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find("cuda_memory_resource"), std::string::npos) << what;
    EXPECT_NE(what.find("2097152"), std::string::npos) << what;  // asked
    EXPECT_NE(what.find("1.00 MiB (1048576 B) free"), std::string::npos) << what;
  }
  void* p = mr.allocate(1 << 20);  // usable after the failure
  mr.deallocate(p, 1 << 20);
}

TEST(cuda_memory_resource, equal_over_the_same_runtime_only)
{
  detail::host_runtime rt1;
  detail::host_runtime rt2;
  cuda_memory_resource a{rt1};
  cuda_memory_resource b{rt1};
  cuda_memory_resource c{rt2};
  managed_memory_resource m{rt1};
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a == c);
  EXPECT_FALSE(a == m);
  EXPECT_FALSE(is_resource_adaptor<cuda_memory_resource>);
}

TEST(managed_memory_resource, takes_managed_memory_from_the_runtime)
{
  detail::host_runtime rt;
  managed_memory_resource mr{rt};
  void* p = mr.allocate(4096);
  std::memset(p, 1, 4096);  // backed host memory stands in for unified memory
  EXPECT_EQ(rt.live_allocations(), 1u);
  mr.deallocate(p, 4096);
  EXPECT_EQ(rt.live_allocations(), 0u);
}

TEST(pinned_memory_resource, honours_large_alignments_and_async_pretence)
{
  detail::host_runtime rt;
  pinned_memory_resource mr{rt};
  for (std::size_t alignment : {8u, 256u, 4096u, 65536u}) {
    void* p = mr.allocate(1000, alignment);
    EXPECT_TRUE(is_pointer_aligned(p, alignment)) << alignment;
    std::memset(p, 0, 1000);
    mr.deallocate(p, 1000, alignment);
  }
  void* q = mr.allocate_async(100, cuda_stream_view{});
  mr.deallocate_async(q, 100, cuda_stream_view{});
  EXPECT_EQ(rt.live_allocations(), 0u);
  void* r = mr.allocate(10, 3);  // not a power of two: falls back to max_align_t
  EXPECT_TRUE(is_pointer_aligned(r, alignof(std::max_align_t)));
  mr.deallocate(r, 10, 3);
  EXPECT_EQ(rt.live_allocations(), 0u);
  rt.fail_next_allocations(1);
  EXPECT_THROW((void)mr.allocate(10), out_of_memory);
}

TEST(new_delete_resource, allocates_aligned_host_memory)
{
  new_delete_resource mr;
  void* p = mr.allocate(100, 512);
  EXPECT_TRUE(is_pointer_aligned(p, 512));
  mr.deallocate(p, 100, 512);
  EXPECT_TRUE(mr == new_delete_resource{});
  void* q = mr.allocate(10, 3);  // not a power of two: falls back to max_align_t
  EXPECT_TRUE(is_pointer_aligned(q, alignof(std::max_align_t)));
  mr.deallocate(q, 10, 3);
  EXPECT_EQ(mr.allocate(0), nullptr);
}

TEST(sam_headroom_memory_resource, keeps_its_headroom_and_frees)
{
  detail::host_runtime rt{{.capacity_bytes = 1 << 20}};
  sam_headroom_memory_resource mr{512 << 10, rt};
  EXPECT_EQ(mr.get_headroom(), 512u << 10);
  void* p = mr.allocate(4 << 20);  // system memory: may exceed device memory
  mr.deallocate(p, 4 << 20);
  EXPECT_FALSE(mr == sam_headroom_memory_resource(1, rt));
  EXPECT_TRUE(mr == sam_headroom_memory_resource(512 << 10, rt));
}

}  // namespace
}  // namespace gpumem::mr
