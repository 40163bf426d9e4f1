// thread_safe_resource_adaptor: forwards, and never lets two threads into the upstream at once.
#include "adaptor_test_support.hpp"

#include <gpumem/mr/thread_safe_resource_adaptor.hpp>

#include <atomic>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

/// An upstream that is not thread-safe: it records when two calls overlap.
class overlap_detector final : public mr::device_memory_resource {
 public:
  explicit overlap_detector(mr::device_memory_resource& up) : up_{&up} {}
  [[nodiscard]] bool overlapped() const { return overlapped_; }
  [[nodiscard]] int calls() const { return calls_; }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view s) override
  {
    enter();
    void* p = up_->allocate(bytes, s);
    inside_ = false;
    return p;
  }
  void do_deallocate(void* p, std::size_t bytes, cuda_stream_view s) noexcept override
  {
    enter();
    up_->deallocate(p, bytes, s);
    inside_ = false;
  }
  void enter()
  {
    if (inside_.exchange(true)) { overlapped_ = true; }
    ++calls_;  // a plain int: TSan reports a race if the adaptor lets calls overlap
    std::this_thread::yield();
  }
  mr::device_memory_resource* up_;
  std::atomic<bool> inside_{false};
  std::atomic<bool> overlapped_{false};
  int calls_{0};
};

using thread_safe_test = host_upstream;

TEST_F(thread_safe_test, SerializesEveryCallIntoTheUpstream)
{
  overlap_detector upstream{base};
  mr::thread_safe_resource_adaptor<overlap_detector> mr{&upstream};
  static_assert(std::is_same_v<decltype(mr)::lock_t, std::lock_guard<std::mutex>>);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        void* p = mr.allocate(256 * (1 + i % 7));
        mr.deallocate(p, 256 * (1 + i % 7));
      }
    });
  }
  for (auto& t : threads) { t.join(); }
  EXPECT_FALSE(upstream.overlapped());
  EXPECT_EQ(upstream.calls(), 4 * 200 * 2);
  EXPECT_EQ(rt.live_allocations(), 0u);
}

TEST_F(thread_safe_test, ForwardsAndComparesByUpstream)
{
  mr::thread_safe_resource_adaptor<mr::cuda_memory_resource> a{&base};
  mr::thread_safe_resource_adaptor<mr::cuda_memory_resource> b{device_async_resource_ref{base}};
  EXPECT_TRUE(a.get_upstream_resource() == device_async_resource_ref{base});
  EXPECT_TRUE(mr::is_resource_adaptor<decltype(a)>);
  EXPECT_TRUE(a == b);
  void* p = a.allocate(1000);
  b.deallocate(p, 1000);  // equal adaptors: memory of one may be freed by the other
  EXPECT_EQ(rt.live_allocations(), 0u);
  EXPECT_THROW((mr::thread_safe_resource_adaptor<mr::cuda_memory_resource>{
                   static_cast<mr::cuda_memory_resource*>(nullptr)}),
               gpumem::logic_error);
  rt.fail_next_allocations(1);
  EXPECT_THROW((void)a.allocate(256), gpumem::out_of_memory);
  void* q = a.allocate(256);  // the lock was released by the failed call
  a.deallocate(q, 256);
}

}  // namespace
}  // namespace gpumem::test
