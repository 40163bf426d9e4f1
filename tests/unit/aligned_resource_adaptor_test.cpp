// aligned_resource_adaptor: power-of-two check, threshold, padding, failure leaves it usable.
#include "adaptor_test_support.hpp"

#include <gpumem/mr/aligned_resource_adaptor.hpp>

#include <cstring>

namespace gpumem::test {
namespace {

using aligned      = mr::aligned_resource_adaptor<mr::cuda_memory_resource>;
using aligned_test = host_upstream;

TEST_F(aligned_test, DefaultsAndRejectsBadArguments)
{
  static_assert(aligned::default_alignment_threshold == 0);
  aligned a{&base};
  EXPECT_EQ(a.alignment(), CUDA_ALLOCATION_ALIGNMENT);
  EXPECT_EQ(a.alignment_threshold(), 0u);
  EXPECT_THROW((aligned{&base, 3000}), gpumem::logic_error);
  EXPECT_THROW((aligned{device_async_resource_ref{base}, 0}), gpumem::logic_error);
  EXPECT_THROW((aligned{static_cast<mr::cuda_memory_resource*>(nullptr)}), gpumem::logic_error);
  EXPECT_TRUE(mr::is_resource_adaptor<aligned>);
  EXPECT_TRUE(a.get_upstream_resource() == device_async_resource_ref{base});
}

TEST_F(aligned_test, OverAlignsAllocationsAtOrAboveTheThreshold)
{
  aligned a{&base, 4096, 65536};
  for (std::size_t n : {std::size_t{1}, std::size_t{5000}, std::size_t{65535}}) {
    void* p = a.allocate(n);  // below the threshold: straight from upstream, no padding
    EXPECT_EQ(rt.used_bytes(), align_up(n, 256)) << n;
    a.deallocate(p, n);
  }
  for (std::size_t n : {std::size_t{65536}, std::size_t{100000}}) {
    void* p = a.allocate(n);
    EXPECT_TRUE(is_pointer_aligned(p, 4096)) << n;
    EXPECT_EQ(rt.used_bytes(), align_up(n + 4096 - 256, 256)) << n;
    std::memset(p, 0xab, n);  // the whole range lies inside the upstream block
    a.deallocate(p, n);
    EXPECT_EQ(rt.live_allocations(), 0u);
  }
}

TEST_F(aligned_test, ManyLiveOverAlignedAllocationsFreeTheirUpstreamBlocks)
{
  aligned a{&base, 1 << 16};
  std::vector<void*> ptrs;
  for (int i = 0; i < 32; ++i) {
    ptrs.push_back(a.allocate(1000 + i, cuda_stream_view{}));
    EXPECT_TRUE(is_pointer_aligned(ptrs.back(), 1 << 16));
  }
  for (int i = 0; i < 32; ++i) { a.deallocate(ptrs[i], 1000 + i); }
  EXPECT_EQ(rt.used_bytes(), 0u);
  EXPECT_EQ(rt.live_allocations(), 0u);
}

TEST_F(aligned_test, UpstreamFailureLeavesTheAdaptorUsable)
{
  aligned a{&base, 8192};
  rt.fail_next_allocations(1);
  EXPECT_THROW((void)a.allocate(10000), gpumem::out_of_memory);
  EXPECT_THROW((void)a.allocate(SIZE_MAX - 100), std::bad_alloc);
  void* p = a.allocate(10000);
  EXPECT_TRUE(is_pointer_aligned(p, 8192));
  a.deallocate(p, 10000);
  EXPECT_EQ(rt.used_bytes(), 0u);
}

}  // namespace
}  // namespace gpumem::test
