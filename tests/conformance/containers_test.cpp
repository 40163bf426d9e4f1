// device_buffer, device_uvector<T> and device_scalar<T> over every resource of the conformance
// list, on the host stand-in and on a GPU: contents survive copies, resizes, reserves and
// shrinks; moves leave the source empty; element access checks its index; every byte allocated
// is freed (the resources' own conformance suite checks that they stay usable).
#include <conformance/resources.hpp>

#include <gpumem/device_buffer.hpp>
#include <gpumem/device_scalar.hpp>
#include <gpumem/device_uvector.hpp>

#include <cstdint>
#include <numeric>
#include <vector>

namespace gpumem::test {
namespace {

template <class Config>
class containers : public conformance<Config> {
 protected:
  device_async_resource_ref ref() { return device_async_resource_ref{this->mr()}; }
  detail::runtime& rt() { return this->be().runtime(); }
  /// True when the backend's copies move real bytes (a GPU, or backed host memory).
  bool copies_bytes()
  {
    return this->be().host_accessible() || this->be().name() == std::string{"cuda"};
  }
  std::vector<std::uint8_t> read(void const* p, std::size_t n, cudaStream_t s)
  {
    std::vector<std::uint8_t> out(n);
    if (n != 0) { rt().memcpy_async(out.data(), p, n, s); }
    rt().stream_synchronize(s);
    return out;
  }
  static std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t first)
  {
    std::vector<std::uint8_t> v(n);
    std::iota(v.begin(), v.end(), first);
    return v;
  }
};

TYPED_TEST_SUITE_P(containers);

TYPED_TEST_P(containers, BufferCopiesInAndOutOnItsStream)
{
  auto const s   = this->be().create_stream();
  auto const src = this->pattern(10000, 7);
  device_buffer buf{src.data(), src.size(), s, this->ref(), this->rt()};
  EXPECT_EQ(buf.size(), src.size());
  EXPECT_EQ(buf.capacity(), src.size());
  EXPECT_EQ(buf.stream(), cuda_stream_view{s});
  EXPECT_TRUE(is_pointer_aligned(buf.data()));
  auto const other = this->be().create_stream();
  device_buffer copy{buf, other, this->ref(), this->rt()};
  EXPECT_NE(copy.data(), buf.data());
  EXPECT_EQ(copy.stream(), cuda_stream_view{other});
  if (this->copies_bytes()) {
    this->rt().stream_synchronize(s);
    EXPECT_EQ(this->read(copy.data(), copy.size(), other), src);
  }
}

TYPED_TEST_P(containers, ResizeReserveAndShrinkKeepTheContents)
{
  auto const s   = this->be().create_stream();
  auto const src = this->pattern(4096, 1);
  device_buffer buf{src.data(), src.size(), s, this->ref(), this->rt()};
  void const* first = buf.data();
  buf.resize(1000, s);
  EXPECT_EQ(buf.data(), first) << "shrinking the size allocates nothing";
  EXPECT_EQ(buf.capacity(), 4096U);
  buf.resize(4096, s);
  EXPECT_EQ(buf.data(), first) << "within the capacity";
  buf.reserve(100000, s);
  EXPECT_EQ(buf.capacity(), 100000U);
  EXPECT_EQ(buf.size(), 4096U);
  if (this->copies_bytes()) { EXPECT_EQ(this->read(buf.data(), 4096, s), src); }
  buf.resize(300000, s);
  EXPECT_EQ(buf.capacity(), 300000U);
  buf.resize(4096, s);
  buf.shrink_to_fit(s);
  EXPECT_EQ(buf.capacity(), 4096U);
  if (this->copies_bytes()) { EXPECT_EQ(this->read(buf.data(), 4096, s), src); }
  buf.resize(0, s);
  buf.shrink_to_fit(s);
  EXPECT_EQ(buf.data(), nullptr);
  EXPECT_TRUE(buf.is_empty());
}

TYPED_TEST_P(containers, MovesLeaveTheSourceEmpty)
{
  auto const s = this->be().create_stream();
  device_buffer a{5000, s, this->ref(), this->rt()};
  void* p = a.data();
  device_buffer b{std::move(a)};
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), 5000U);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is specified
  EXPECT_EQ(a.size(), 0U);
  EXPECT_EQ(a.capacity(), 0U);
  device_buffer c{300, s, this->ref(), this->rt()};
  c = std::move(b);  // frees c's 300 bytes first
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(b.data(), nullptr);  // NOLINT(bugprone-use-after-move)
  c = device_buffer{0, s, this->ref(), this->rt()};
  EXPECT_EQ(c.data(), nullptr);
}

TYPED_TEST_P(containers, UvectorElementsAndBounds)
{
  auto const s = this->be().create_stream();
  device_uvector<std::int64_t> v{100, s, this->ref(), this->rt()};
  EXPECT_EQ(v.size(), 100U);
  EXPECT_EQ(v.end() - v.begin(), 100);
  EXPECT_EQ(v.element_ptr(3), v.data() + 3);
  std::int64_t const x = -42;
  v.set_element(0, x, s);
  v.set_element(99, std::int64_t{7} << 40, s);
  v.set_element_to_zero_async(50, s);
  if (this->copies_bytes()) {
    EXPECT_EQ(v.front_element(s), -42);
    EXPECT_EQ(v.back_element(s), std::int64_t{7} << 40);
    EXPECT_EQ(v.element(50, s), 0);
  }
  EXPECT_THROW((void)v.element(100, s), out_of_range);
  EXPECT_THROW(v.set_element(100, x, s), out_of_range);
  EXPECT_THROW(v.set_element_to_zero_async(1000, s), out_of_range);
  v.resize(200, s);
  EXPECT_EQ(v.capacity(), 200U);
  if (this->copies_bytes()) { EXPECT_EQ(v.element(0, s), -42) << "kept across the growth"; }
  device_uvector<std::int64_t> copy{v, s, this->ref(), this->rt()};
  EXPECT_EQ(copy.size(), 200U);
  if (this->copies_bytes()) { EXPECT_EQ(copy.element(99, s), std::int64_t{7} << 40); }
  device_buffer released = v.release();
  EXPECT_EQ(released.size(), 200 * sizeof(std::int64_t));
  EXPECT_TRUE(v.is_empty());
  EXPECT_THROW((void)v.front_element(s), out_of_range);
}

TYPED_TEST_P(containers, ScalarValue)
{
  auto const s = this->be().create_stream();
  device_scalar<double> d{2.5, s, this->ref(), this->rt()};
  double const next = -1.25;
  d.set_value_async(next, s);
  if (this->copies_bytes()) { EXPECT_EQ(d.value(s), -1.25); }
  device_scalar<double> copy{d, s, this->ref(), this->rt()};
  d.set_value_to_zero_async(s);
  if (this->copies_bytes()) {
    EXPECT_EQ(d.value(s), 0.0);
    EXPECT_EQ(copy.value(s), -1.25);
  }
  EXPECT_NE(copy.data(), d.data());
  device_scalar<int> u{s, this->ref(), this->rt()};
  EXPECT_NE(u.data(), nullptr);
}

TYPED_TEST_P(containers, BadInputThrowsAndLeaksNothing)
{
  auto const s = this->be().create_stream();
  EXPECT_THROW((device_buffer{nullptr, 64, s, this->ref(), this->rt()}), logic_error);
  device_buffer none{nullptr, 0, s, this->ref(), this->rt()};
  EXPECT_EQ(none.data(), nullptr);
  device_buffer buf{256, s, this->ref(), this->rt()};
  void const* p = buf.data();
  EXPECT_THROW(buf.reserve(SIZE_MAX / 2, s), std::bad_alloc);
  EXPECT_EQ(buf.data(), p) << "a failed growth leaves the buffer as it was";
  EXPECT_EQ(buf.capacity(), 256U);
  EXPECT_THROW((device_uvector<std::int64_t>{SIZE_MAX / 16, s, this->ref(), this->rt()}),
               std::bad_alloc);
  EXPECT_THROW((device_uvector<std::int64_t>{SIZE_MAX, s, this->ref(), this->rt()}), out_of_memory)
      << "the byte count would wrap";
}

REGISTER_TYPED_TEST_SUITE_P(containers, BufferCopiesInAndOutOnItsStream,
                            ResizeReserveAndShrinkKeepTheContents, MovesLeaveTheSourceEmpty,
                            UvectorElementsAndBounds, ScalarValue, BadInputThrowsAndLeaksNothing);

INSTANTIATE_TYPED_TEST_SUITE_P(all, containers, all_configs, config_names);

}  // namespace
}  // namespace gpumem::test
