// gpumem/mr/pool_memory_resource.hpp — a coalescing best-fit suballocator over a pool of memory
// taken from an upstream resource.
//
// Stream-ordered (detail/stream_ordered_memory_resource.hpp): a block freed on a stream is reused
// at once on that stream and reaches another stream only after that stream is ordered after the
// free. Best fit in O(log n) (detail/coalescing_free_list.hpp); blocks coalesce within an upstream
// chunk. Sizes are rounded up to allocation_alignment (256 bytes).
//
// Growth policy: when nothing fits (after stealing from other streams and reclaiming every
// stream's free memory behind a device synchronization), the pool asks upstream for
// max(request, current pool size, 1 MiB), capped at maximum_pool_size - pool_size(); if upstream
// fails, it halves the attempt down to the request. When even that fails, allocate throws
// out_of_memory naming the request, the pool size and maximum, the free bytes and the largest free
// block. Memory is returned upstream only by the destructor.
//
// Errors: logic_error when the upstream is null, a size is not a multiple of 256, or
// initial_pool_size > maximum_pool_size; out_of_memory as above. A deallocate of a pointer not
// handed out (double free, foreign pointer) is reported on stderr and ignored
// (bad_deallocations()). Thread safety: allocate/deallocate are thread-safe and work with the
// per-thread default stream.
#pragma once

#include <gpumem/detail/coalescing_free_list.hpp>
#include <gpumem/detail/stream_ordered_memory_resource.hpp>

#include <algorithm>
#include <optional>
#include <string>

namespace gpumem::mr {

template <class Upstream>
class pool_memory_resource
    : public detail::stream_ordered_memory_resource<pool_memory_resource<Upstream>,
                                                    detail::coalescing_free_list>,
      public gpumem::detail::forward_properties<pool_memory_resource<Upstream>, Upstream> {
  using base = detail::stream_ordered_memory_resource<pool_memory_resource<Upstream>,
                                                      detail::coalescing_free_list>;
  friend base;

 public:
  static constexpr std::size_t allocation_alignment = CUDA_ALLOCATION_ALIGNMENT;
  static constexpr char const* resource_name        = "pool_memory_resource";

  /// Allocates `initial_pool_size` bytes from `upstream_mr` now. `runtime` (extension) is used for
  /// events and synchronization; pass the upstream's runtime when it is not CUDA's.
  explicit pool_memory_resource(device_async_resource_ref upstream_mr,
                                std::size_t initial_pool_size,
                                std::optional<std::size_t> maximum_pool_size = std::nullopt,
                                gpumem::runtime& runtime = gpumem::cuda_device())
      : base{runtime, detail::coalescing_free_list{}},
        upstream_{upstream_mr},
        maximum_pool_size_{maximum_pool_size}
  {
    check_sizes(initial_pool_size);
    if (initial_pool_size > 0) { this->adopt_chunk(take_upstream(initial_pool_size, {})); }
  }

  explicit pool_memory_resource(Upstream* upstream_mr, std::size_t initial_pool_size,
                                std::optional<std::size_t> maximum_pool_size = std::nullopt,
                                gpumem::runtime& runtime = gpumem::cuda_device())
      : pool_memory_resource{to_device_async_resource_ref_checked(upstream_mr), initial_pool_size,
                             maximum_pool_size, runtime}
  {
    this->link_upstream(upstream_mr);
  }

  template <class Upstream2                                                        = Upstream,
            cuda::std::enable_if_t<gpumem::detail::async_resource<Upstream2>, int> = 0>
  explicit pool_memory_resource(Upstream2& upstream_mr, std::size_t initial_pool_size,
                                std::optional<std::size_t> maximum_pool_size = std::nullopt,
                                gpumem::runtime& runtime = gpumem::cuda_device())
      : pool_memory_resource{device_async_resource_ref{upstream_mr}, initial_pool_size,
                             maximum_pool_size, runtime}
  {
    this->link_upstream(&upstream_mr);
  }

  /// Returns all memory to upstream.
  ~pool_memory_resource() override { this->release_all(); }

  [[nodiscard]] device_async_resource_ref get_upstream_resource() const noexcept
  {
    return upstream_;
  }
  /// The largest size the pool may grow to (nullopt: what upstream can give).
  [[nodiscard]] std::optional<std::size_t> maximum_pool_size() const noexcept
  {
    return maximum_pool_size_;
  }

 private:
  static constexpr std::size_t min_growth_bytes = std::size_t{1} << 20;

  void check_sizes(std::size_t initial) const
  {
    GPUMEM_EXPECTS(is_aligned(initial, allocation_alignment), logic_error,
                   detail::format("pool_memory_resource: initial_pool_size ", initial,
                                  " is not a multiple of ", allocation_alignment));
    if (!maximum_pool_size_) { return; }
    GPUMEM_EXPECTS(is_aligned(*maximum_pool_size_, allocation_alignment), logic_error,
                   detail::format("pool_memory_resource: maximum_pool_size ", *maximum_pool_size_,
                                  " is not a multiple of ", allocation_alignment));
    GPUMEM_EXPECTS(initial <= *maximum_pool_size_, logic_error,
                   detail::format("pool_memory_resource: initial_pool_size ", initial,
                                  " exceeds maximum_pool_size ", *maximum_pool_size_));
  }

  [[nodiscard]] std::size_t headroom() const noexcept
  {
    return maximum_pool_size_ ? *maximum_pool_size_ - this->pool_size() : SIZE_MAX;
  }

  // -- hooks of the stream-ordered core ---------------------------------------------------------
  [[nodiscard]] std::size_t allocation_size(std::size_t bytes) const
  {
    GPUMEM_EXPECTS(can_align_up(bytes, allocation_alignment) &&
                       (!maximum_pool_size_ || bytes <= *maximum_pool_size_),
                   out_of_memory,
                   detail::format("pool_memory_resource: cannot allocate ",
                                  detail::bytes_str(bytes), ": larger than the maximum pool size ",
                                  maximum_pool_size_ ? detail::bytes_str(*maximum_pool_size_)
                                                     : std::string{"(unbounded)"}));
    return align_up(bytes, allocation_alignment);
  }

  [[nodiscard]] static bool size_matches(std::size_t bytes, std::size_t block) noexcept
  {
    return can_align_up(bytes, allocation_alignment) &&
           align_up(bytes, allocation_alignment) == block;
  }

  detail::free_block allocate_chunk(std::size_t size, cuda_stream_view stream);

  detail::free_block take_upstream(std::size_t bytes, cuda_stream_view stream)
  {
    void* ptr = gpumem::detail::async_allocate(upstream_, bytes, allocation_alignment, stream);
    return {static_cast<char*>(ptr), bytes, 0};
  }

  void deallocate_chunk(detail::free_block chunk) noexcept
  {
    gpumem::detail::async_deallocate(upstream_, chunk.ptr, chunk.size, allocation_alignment,
                                     cuda_stream_view{});
  }

  device_async_resource_ref upstream_;
  std::optional<std::size_t> maximum_pool_size_;
};

template <class Upstream>
detail::free_block pool_memory_resource<Upstream>::allocate_chunk(std::size_t size,
                                                                  cuda_stream_view stream)
{
  auto const room            = headroom();
  std::string upstream_error = "maximum pool size reached";
  auto attempt = std::min(room, std::max({size, this->pool_size(), min_growth_bytes}));
  while (size <= room && attempt >= size) {
    try {
      return take_upstream(attempt, stream);
    } catch (std::bad_alloc const& e) {
      upstream_error = e.what();
    }
    if (attempt == size) { break; }
    attempt = std::max(size, align_up(attempt / 2, allocation_alignment));
  }
  GPUMEM_FAIL(
      out_of_memory,
      detail::format(
          "pool_memory_resource: cannot allocate ", detail::bytes_str(size), " (maximum pool size ",
          maximum_pool_size_ ? detail::bytes_str(*maximum_pool_size_) : std::string{"unbounded"},
          "): ", this->describe_state(), "; upstream: ", upstream_error));
}

static_assert(gpumem::detail::async_resource_with<pool_memory_resource<device_memory_resource>,
                                                  cuda::mr::device_accessible>);

}  // namespace gpumem::mr
