#include <gpumem/cuda_stream_view.hpp>

#include <gtest/gtest.h>

#include <unordered_set>

namespace gpumem {
namespace {

TEST(cuda_stream_view, default_and_per_thread_predicates)
{
  EXPECT_TRUE(cuda_stream_default.is_default());
  EXPECT_TRUE(cuda_stream_legacy.is_default());
  EXPECT_FALSE(cuda_stream_default.is_per_thread_default());
  EXPECT_TRUE(cuda_stream_per_thread.is_per_thread_default());
  EXPECT_FALSE(cuda_stream_per_thread.is_default());
}

TEST(cuda_stream_view, converts_both_ways_and_compares_by_handle)
{
  auto const handle = reinterpret_cast<cudaStream_t>(0x1234);
  cuda_stream_view v{handle};
  EXPECT_EQ(v.value(), handle);
  cudaStream_t back = v;
  EXPECT_EQ(back, handle);
  ::cuda::stream_ref ref = v;
  EXPECT_EQ(ref.get(), handle);
  EXPECT_EQ(cuda_stream_view{ref}, v);
  EXPECT_FALSE(v == cuda_stream_default);
  std::unordered_set<cuda_stream_view> set{v, cuda_stream_default, v};
  EXPECT_EQ(set.size(), 2u);
}

}  // namespace
}  // namespace gpumem
