// failure_callback_resource_adaptor: retry once (RMM's documented example), rethrow, other
// exceptions.
#include "adaptor_test_support.hpp"

#include <gpumem/mr/failure_callback_resource_adaptor.hpp>
#include <gpumem/mr/per_device_resource.hpp>

namespace gpumem::test {
namespace {

using failure_callback_adaptor = mr::failure_callback_resource_adaptor<mr::device_memory_resource>;
using failure_callback_test    = host_upstream;

// RMM's documented example: retry an allocation once, then let the adaptor throw.
bool failure_handler(std::size_t, void* arg)
{
  bool& retried = *reinterpret_cast<bool*>(arg);
  if (!retried) {
    retried = true;
    return true;
  }
  return false;
}

TEST_F(failure_callback_test, SeedRetryOnceExample)
{
  bool retried{false};
  failure_callback_adaptor mr{device_async_resource_ref{base}, failure_handler, &retried};
  auto const previous = mr::set_current_device_resource_ref(mr);
  rt.fail_next_allocations(1);  // the first try fails, the retry succeeds
  void* p = gpumem::detail::async_allocate(mr::get_current_device_resource_ref(), 512, 256,
                                           cuda::stream_ref{cudaStream_t{}});
  EXPECT_TRUE(retried);
  mr.deallocate(p, 512);
  rt.fail_next_allocations(2);  // already retried once: the second failure is rethrown
  EXPECT_THROW((void)mr.allocate(512), gpumem::out_of_memory);
  mr::set_current_device_resource_ref(previous);
  EXPECT_EQ(rt.live_allocations(), 0u);
}

TEST_F(failure_callback_test, CallbackSeesBytesAndArgAndCanGiveUp)
{
  struct seen_t {
    int calls{};
    std::size_t bytes{};
  } seen;
  failure_callback_adaptor mr{&base,
                              [](std::size_t bytes, void* arg) {
                                auto& s = *static_cast<seen_t*>(arg);
                                ++s.calls;
                                s.bytes = bytes;
                                return s.calls < 3;  // retry twice
                              },
                              &seen};
  rt.fail_next_allocations(3);  // three tries, three failures: given up after the third
  EXPECT_THROW((void)mr.allocate(4096), gpumem::out_of_memory);
  EXPECT_EQ(seen.calls, 3);
  EXPECT_EQ(seen.bytes, 4096u);
  seen.calls = 0;
  rt.fail_next_allocations(2);  // two failures, two retries, the third try succeeds
  void* p = mr.allocate(4096);
  EXPECT_EQ(seen.calls, 2);
  mr.deallocate(p, 4096);
}

TEST_F(failure_callback_test, OtherExceptionTypesPassThroughWithoutCallback)
{
  int calls = 0;
  mr::failure_callback_resource_adaptor<mr::device_memory_resource, gpumem::logic_error> mr{
      &base, [](std::size_t, void* c) { return ++*static_cast<int*>(c) < 10; }, &calls};
  static_assert(std::is_same_v<decltype(mr)::exception_type, gpumem::logic_error>);
  rt.fail_next_allocations(1);
  EXPECT_THROW((void)mr.allocate(256), gpumem::out_of_memory);
  EXPECT_EQ(calls, 0);
  EXPECT_THROW((failure_callback_adaptor{static_cast<mr::device_memory_resource*>(nullptr),
                                         failure_handler, nullptr}),
               gpumem::logic_error);
}

TEST_F(failure_callback_test, MovesAndComparesByUpstream)
{
  failure_callback_adaptor a{&base, failure_handler, nullptr};
  failure_callback_adaptor b{std::move(a)};
  void* p = b.allocate(256);
  b.deallocate(p, 256);
  failure_callback_adaptor c{&base, failure_handler, nullptr};
  EXPECT_TRUE(b == c);
  EXPECT_TRUE(mr::is_resource_adaptor<failure_callback_adaptor>);
}

}  // namespace
}  // namespace gpumem::test
