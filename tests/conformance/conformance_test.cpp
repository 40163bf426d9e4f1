// The conformance suite: every device resource in resources.hpp, over the host stand-in and CUDA.
#include <conformance/resources.hpp>

#include <gpumem/detail/over_aligned.hpp>
#include <gpumem/error.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

constexpr std::size_t sizes[] = {1, 255, 256, 257, 1000, 4096, 65536, (1 << 20) + 1, 10 << 20};

TYPED_TEST_P(conformance, AllocatesManySizesAlignedAndDisjoint)
{
  live_set live{this->be().host_accessible()};
  unsigned char tag = 1;
  for (auto n : sizes) { live.add(this->mr().allocate(n), n, tag++); }
  for (auto const& [p, info] : std::map{live.all()}) { this->mr().deallocate(p, live.remove(p)); }
}

TYPED_TEST_P(conformance, ZeroBytesIsNullAndFreeingNullIsANoOp)
{
  EXPECT_EQ(this->mr().allocate(0), nullptr);
  this->mr().deallocate(nullptr, 0);
  this->mr().deallocate(nullptr, 64);
}

TYPED_TEST_P(conformance, HonoursAlignmentAndRejectsBadAlignment)
{
  for (std::size_t alignment = 1; alignment <= 256; alignment *= 2) {
    void* p = this->mr().allocate(100, alignment);
    EXPECT_TRUE(is_pointer_aligned(p, alignment));
    this->mr().deallocate(p, 100, alignment);
    void* q = this->mr().allocate_async(100, alignment, cuda_stream_view{});
    EXPECT_TRUE(is_pointer_aligned(q, alignment));
    this->mr().deallocate_async(q, 100, alignment, cuda_stream_view{});
  }
  EXPECT_THROW((void)this->mr().allocate(100, std::size_t{3}), gpumem::logic_error);
  EXPECT_THROW((void)this->mr().allocate(100, std::size_t{768}), gpumem::logic_error);
  void* p = this->mr().allocate(256);  // still usable
  this->mr().deallocate(p, 256);
}

// Alignments above 256: the base pads and aligns; the memory is usable and disjoint, and freeing
// through the matching call (or a resource ref) returns all of it.
TYPED_TEST_P(conformance, HonoursAlignmentsAbove256)
{
  auto const live_before = detail::over_aligned_live_count();
  live_set live{this->be().host_accessible()};
  unsigned char tag = 1;
  for (std::size_t alignment : {512, 1024, 4096}) {
    for (std::size_t n : {1, 300, 5000}) {
      void* p = this->mr().allocate(n, alignment);
      EXPECT_TRUE(is_pointer_aligned(p, alignment)) << p << " " << alignment;
      live.add(p, n, tag++);
      void* q = this->mr().allocate_async(n, alignment, cuda_stream_view{});
      EXPECT_TRUE(is_pointer_aligned(q, alignment)) << q << " " << alignment;
      live.add(q, n, tag++);
      this->mr().deallocate(p, live.remove(p), alignment);
      this->mr().deallocate_async(q, live.remove(q), alignment, cuda_stream_view{});
    }
  }
  device_async_resource_ref ref{this->mr()};
  void* r = gpumem::detail::async_allocate(ref, 700, 2048, ::cuda::stream_ref{cudaStream_t{}});
  EXPECT_TRUE(is_pointer_aligned(r, 2048));
  gpumem::detail::async_deallocate(ref, r, 700, 2048, ::cuda::stream_ref{cudaStream_t{}});
  EXPECT_EQ(detail::over_aligned_live_count(), live_before);
}

// The _async forms without an alignment are allocate/deallocate on the given stream.
TYPED_TEST_P(conformance, AsyncFormsWithoutAlignment)
{
  auto s1 = this->be().create_stream();
  live_set live{this->be().host_accessible()};
  void* a = this->mr().allocate_async(3000, s1);
  EXPECT_TRUE(is_pointer_aligned(a));
  live.add(a, 3000, 1);
  void* b = this->mr().allocate_async(1, cuda_stream_view{});
  live.add(b, 1, 2);
  EXPECT_EQ(this->mr().allocate_async(0, s1), nullptr);
  this->mr().deallocate_async(a, live.remove(a), s1);
  this->mr().deallocate_async(b, live.remove(b), cuda_stream_view{});
  this->mr().deallocate_async(nullptr, 0, s1);
}

TYPED_TEST_P(conformance, EqualityAndResourceRef)
{
  EXPECT_TRUE(this->mr() == this->mr());
  EXPECT_FALSE(this->mr() != this->mr());
  EXPECT_TRUE(this->mr().is_equal(this->mr()));
  device_async_resource_ref ref{this->mr()};
  void* p = gpumem::detail::async_allocate(ref, 512, 256, ::cuda::stream_ref{cudaStream_t{}});
  EXPECT_NE(p, nullptr);
  gpumem::detail::async_deallocate(ref, p, 512, 256, ::cuda::stream_ref{cudaStream_t{}});
  auto checked = to_device_async_resource_ref_checked(&this->mr());
  EXPECT_TRUE(checked == ref);
}

// The member names of CCCL 3.1 and newer (stream first; _sync), present on every CCCL version.
TYPED_TEST_P(conformance, CcclMemberNamesAllocateAlignedAndCheckAlignment)
{
  live_set live{this->be().host_accessible()};
  void* p = this->mr().allocate(::cuda::stream_ref{cudaStream_t{}}, 1000, 128);
  EXPECT_TRUE(is_pointer_aligned(p, 128));
  live.add(p, 1000, 3);
  void* q = this->mr().allocate_sync(300, 64);
  EXPECT_TRUE(is_pointer_aligned(q, 64));
  live.add(q, 300, 4);
  this->mr().deallocate(::cuda::stream_ref{cudaStream_t{}}, p, live.remove(p), 128);
  this->mr().deallocate_sync(q, live.remove(q), 64);
  EXPECT_THROW((void)this->mr().allocate_sync(100, 3), gpumem::logic_error);
  EXPECT_THROW((void)this->mr().allocate(::cuda::stream_ref{cudaStream_t{}}, 100, 3),
               gpumem::logic_error);
}

TYPED_TEST_P(conformance, AbsurdSizesThrowBadAllocAndLeaveResourceUsable)
{
  for (std::size_t n : {SIZE_MAX, SIZE_MAX / 2}) {
    EXPECT_THROW((void)this->mr().allocate(n), std::bad_alloc) << n << " bytes";
  }
  // More than the device has (not for resources backed by system memory).
  if constexpr (!requires { TypeParam::maker::system_backed; }) {
    auto const total = this->be().runtime().memory_info().total_bytes;
    EXPECT_THROW((void)this->mr().allocate(total + 1), std::bad_alloc) << total + 1 << " bytes";
  }
  EXPECT_THROW((void)this->mr().allocate(SIZE_MAX - 10, std::size_t{256}), std::bad_alloc);
  live_set live{this->be().host_accessible()};
  void* p = this->mr().allocate(4096);
  live.add(p, 4096, 7);
  this->mr().deallocate(p, live.remove(p));
}

TYPED_TEST_P(conformance, DeallocatesOnAnotherThread)
{
  std::vector<void*> ptrs;
  for (int i = 0; i < 16; ++i) { ptrs.push_back(this->mr().allocate(1024 * (i + 1))); }
  std::thread t{[&] {
    for (int i = 0; i < 16; ++i) { this->mr().deallocate(ptrs[i], 1024 * (i + 1)); }
  }};
  t.join();
  void* p = this->mr().allocate(2048);
  EXPECT_NE(p, nullptr);
  this->mr().deallocate(p, 2048);
}

TYPED_TEST_P(conformance, AllocatesAndFreesOnOtherStreams)
{
  auto s1 = this->be().create_stream();
  auto s2 = this->be().create_stream();
  live_set live{this->be().host_accessible()};
  void* a = this->mr().allocate(5000, s1);
  void* b = this->mr().allocate(5000, s2);
  live.add(a, 5000, 1);
  live.add(b, 5000, 2);
  this->be().synchronize();
  this->mr().deallocate(a, live.remove(a), s2);  // freed on another stream after a sync
  this->mr().deallocate(b, live.remove(b), cuda_stream_per_thread);
  void* c = this->mr().allocate(5000, cuda_stream_per_thread);
  live.add(c, 5000, 3);
  this->mr().deallocate(c, live.remove(c), cuda_stream_per_thread);
}

// Memory freed on stream A behind unfinished work must not reach stream B before B is ordered
// after that work.
TYPED_TEST_P(conformance, FreedMemoryReachesAnotherStreamOnlyInOrder)
{
  auto a = this->be().create_stream();
  auto b = this->be().create_stream();
  for (std::size_t n : {std::size_t{256}, std::size_t{64} << 10, std::size_t{3} << 20}) {
    void* p = this->mr().allocate(n, a);
    this->be().hold(a);  // A is still working on p
    this->mr().deallocate(p, n, a);
    void* q = this->mr().allocate(n, b);
    if (q == p) {
      EXPECT_TRUE(this->be().ordered_after_held(a, b)) << "block reached stream B before A's work";
    }
    this->be().release(a);
    this->mr().deallocate(q, n, b);
    this->be().synchronize();
  }
}

TYPED_TEST_P(conformance, RandomOperationsKeepAllocationsDisjoint)
{
  std::mt19937_64 rng{42};
  auto s1                = this->be().create_stream();
  cudaStream_t streams[] = {cudaStream_t{}, s1};
  live_set live{this->be().host_accessible()};
  std::map<void*, cudaStream_t> stream_of;
  for (int op = 0; op < 1500; ++op) {
    if (live.size() < 48 && (live.empty() || rng() % 3 != 0)) {
      auto const n     = std::size_t{1} << (rng() % 21);
      auto const s     = streams[rng() % 2];
      auto const bytes = n + rng() % n;  // freed with this same size (the contract)
      void* p          = this->mr().allocate(bytes, s);
      live.add(p, bytes, static_cast<unsigned char>(op));
      stream_of[p] = s;
    } else {
      auto it = std::next(live.all().begin(), static_cast<long>(rng() % live.size()));
      void* p = it->first;
      this->mr().deallocate(p, live.remove(p) + 0, stream_of[p]);
    }
  }
  for (auto const& [p, info] : std::map{live.all()}) {
    this->mr().deallocate(p, live.remove(p), stream_of[p]);
  }
}

TYPED_TEST_P(conformance, ManyThreadsAllocateConcurrently)
{
  if constexpr (!TypeParam::maker::thread_safe) { GTEST_SKIP() << "not thread-safe by contract"; }
  constexpr int threads = 4;
  std::vector<std::thread> pool;
  std::vector<cudaStream_t> streams;
  for (int t = 0; t < threads; ++t) { streams.push_back(this->be().create_stream()); }
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<std::pair<void*, std::size_t>> mine;
      for (int i = 0; i < 400; ++i) {
        std::size_t const n = 256u << (rng() % 8);
        mine.emplace_back(this->mr().allocate(n, streams[t]), n);
        if (mine.size() > 16) {
          this->mr().deallocate(mine.front().first, mine.front().second, streams[t]);
          mine.erase(mine.begin());
        }
      }
      for (auto [p, n] : mine) { this->mr().deallocate(p, n, streams[t]); }
    });
  }
  for (auto& th : pool) { th.join(); }
}

REGISTER_TYPED_TEST_SUITE_P(
    conformance, AllocatesManySizesAlignedAndDisjoint, ZeroBytesIsNullAndFreeingNullIsANoOp,
    HonoursAlignmentAndRejectsBadAlignment, HonoursAlignmentsAbove256, AsyncFormsWithoutAlignment,
    EqualityAndResourceRef, CcclMemberNamesAllocateAlignedAndCheckAlignment,
    AbsurdSizesThrowBadAllocAndLeaveResourceUsable, DeallocatesOnAnotherThread,
    AllocatesAndFreesOnOtherStreams, FreedMemoryReachesAnotherStreamOnlyInOrder,
    RandomOperationsKeepAllocationsDisjoint, ManyThreadsAllocateConcurrently);

INSTANTIATE_TYPED_TEST_SUITE_P(all, conformance, all_configs, config_names);

}  // namespace
}  // namespace gpumem::test
