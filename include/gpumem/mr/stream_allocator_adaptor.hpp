// gpumem/mr/stream_allocator_adaptor.hpp — a standard Allocator from a stream-ordered one.
//
// Interfaces that want `allocate(n)` / `deallocate(p, n)` cannot take a stream-ordered allocator
// (`allocate(n, stream)`). This adaptor binds one stream to it:
//   auto adapted = stream_allocator_adaptor(polymorphic_allocator<int>{}, stream);
//   int* p = std::allocator_traits<decltype(adapted)>::allocate(adapted, n);  // on `stream`
// The stream must outlive the adaptor. Two adaptors compare equal when their underlying
// allocators do (the stream does not matter to where memory may be freed).
//
// Thread safety: that of the underlying allocator. Throws: what the underlying allocator throws.
#pragma once

#include <gpumem/cuda_stream_view.hpp>

#include <cstddef>
#include <memory>

namespace gpumem::mr {

template <typename Allocator>
class stream_allocator_adaptor {
 public:
  using value_type = typename std::allocator_traits<Allocator>::value_type;

  stream_allocator_adaptor() = delete;

  /// `stream` must not be destroyed before this adaptor.
  stream_allocator_adaptor(Allocator const& allocator, cuda_stream_view stream)
      : alloc_{allocator}, stream_{stream}
  {
  }

  template <typename OtherAllocator>
  stream_allocator_adaptor(stream_allocator_adaptor<OtherAllocator> const& other)  // NOLINT
      : stream_allocator_adaptor{Allocator{other.underlying_allocator()}, other.stream()}
  {
  }

  /// The type of this adaptor over the underlying allocator rebound to T.
  template <typename T>
  struct rebind {
    using other = stream_allocator_adaptor<
        typename std::allocator_traits<Allocator>::template rebind_alloc<T>>;
  };

  [[nodiscard]] value_type* allocate(std::size_t num) { return alloc_.allocate(num, stream()); }

  void deallocate(value_type* ptr, std::size_t num) noexcept
  {
    alloc_.deallocate(ptr, num, stream());
  }

  [[nodiscard]] cuda_stream_view stream() const noexcept { return stream_; }
  [[nodiscard]] Allocator underlying_allocator() const noexcept { return alloc_; }

 private:
  Allocator alloc_;
  cuda_stream_view stream_;
};

template <typename A, typename O>
bool operator==(stream_allocator_adaptor<A> const& lhs, stream_allocator_adaptor<O> const& rhs)
{
  return lhs.underlying_allocator() == rhs.underlying_allocator();
}

template <typename A, typename O>
bool operator!=(stream_allocator_adaptor<A> const& lhs, stream_allocator_adaptor<O> const& rhs)
{
  return !(lhs == rhs);
}

}  // namespace gpumem::mr
