// gpumem/mr/fixed_size_memory_resource.hpp — hands out blocks of one fixed size from a pool of
// blocks taken from an upstream resource.
//
// Only requests of at most get_block_size() bytes are served; a larger request throws
// out_of_memory ("larger than the block size"), since no block could ever hold it.
// The pool starts with blocks_to_preallocate blocks and, when every block is handed out (after
// stealing from other streams and reclaiming their free blocks), grows by blocks_to_preallocate
// more, in one upstream allocation. Stream-ordered like pool_memory_resource
// (detail/stream_ordered_memory_resource.hpp); O(1) take and free
// (detail/fixed_size_free_list.hpp). The block size is rounded up to 256 bytes. Memory goes back
// upstream in the destructor.
//
// Errors: logic_error for a null upstream, a zero block size or block count, or a pool size that
// overflows; out_of_memory as above or when upstream is exhausted (with the pool's state).
// Properties: the upstream's stateless properties are forwarded (e.g. host_accessible over
// managed memory), as cuda::forward_property does (gpumem::detail::forward_properties).
// Thread safety: allocate/deallocate are thread-safe.
#pragma once

#include <gpumem/detail/fixed_size_free_list.hpp>
#include <gpumem/detail/stream_ordered_memory_resource.hpp>
#include <gpumem/mr/capabilities.hpp>

#include <algorithm>
#include <string>

namespace gpumem::mr {

template <class Upstream>
class fixed_size_memory_resource
    : public detail::stream_ordered_memory_resource<fixed_size_memory_resource<Upstream>,
                                                    detail::fixed_size_free_list>,
      public gpumem::detail::forward_properties<fixed_size_memory_resource<Upstream>, Upstream>,
      public block_rounding {
  using base = detail::stream_ordered_memory_resource<fixed_size_memory_resource<Upstream>,
                                                      detail::fixed_size_free_list>;
  friend base;

 public:
  static constexpr std::size_t default_block_size            = std::size_t{1} << 20;
  static constexpr std::size_t default_blocks_to_preallocate = 128;
  static constexpr char const* resource_name                 = "fixed_size_memory_resource";

  /// Allocates `blocks_to_preallocate` blocks from `upstream_mr` now. `runtime` (extension) is
  /// used for events and synchronization.
  explicit fixed_size_memory_resource(
      device_async_resource_ref upstream_mr, std::size_t block_size = default_block_size,
      std::size_t blocks_to_preallocate = default_blocks_to_preallocate,
      gpumem::runtime& runtime          = gpumem::cuda_device())
      : base{runtime, detail::fixed_size_free_list{checked_block_size(block_size)}},
        upstream_{upstream_mr},
        block_size_{align_up(block_size, CUDA_ALLOCATION_ALIGNMENT)},
        blocks_to_preallocate_{blocks_to_preallocate}
  {
    GPUMEM_EXPECTS(blocks_to_preallocate > 0 && blocks_to_preallocate <= SIZE_MAX / block_size_,
                   logic_error,
                   detail::format(resource_name, ": cannot preallocate ", blocks_to_preallocate,
                                  " blocks of ", block_size_, " bytes"));
    this->adopt_chunk(take_upstream(cuda_stream_view{}));
  }

  explicit fixed_size_memory_resource(
      Upstream* upstream_mr, std::size_t block_size = default_block_size,
      std::size_t blocks_to_preallocate = default_blocks_to_preallocate,
      gpumem::runtime& runtime          = gpumem::cuda_device())
      : fixed_size_memory_resource{to_device_async_resource_ref_checked(upstream_mr), block_size,
                                   blocks_to_preallocate, runtime}
  {
  }

  /// Returns all memory to upstream.
  ~fixed_size_memory_resource() override { this->release_all(); }

  [[nodiscard]] device_async_resource_ref get_upstream_resource() const noexcept
  {
    return upstream_;
  }
  [[nodiscard]] std::size_t get_block_size() const noexcept { return block_size_; }
  /// Frees `ptr` (of `bytes`, on `stream`) and returns true when this resource handed it out;
  /// returns false, and reports nothing, for any other pointer (extension: a resource over
  /// several of these, such as binning_memory_resource, asks each candidate once).
  using base::try_deallocate;
  /// Every request takes one block (a larger one fails: it keeps its own size here).
  [[nodiscard]] std::size_t block_for(std::size_t bytes) const override
  {
    return std::max(block_size_, bytes);
  }

 private:
  static std::size_t checked_block_size(std::size_t block_size)
  {
    GPUMEM_EXPECTS(block_size > 0 && can_align_up(block_size, CUDA_ALLOCATION_ALIGNMENT),
                   logic_error, detail::format(resource_name, ": invalid block size ", block_size));
    return align_up(block_size, CUDA_ALLOCATION_ALIGNMENT);
  }

  // -- hooks of the stream-ordered core ---------------------------------------------------------
  [[nodiscard]] std::size_t allocation_size(std::size_t bytes) const
  {
    GPUMEM_EXPECTS(bytes <= block_size_, out_of_memory,
                   detail::format(resource_name, ": cannot allocate ", detail::bytes_str(bytes),
                                  ": larger than the block size ", detail::bytes_str(block_size_)));
    return block_size_;
  }

  [[nodiscard]] bool size_matches(std::size_t bytes, std::size_t) const noexcept
  {
    return bytes <= block_size_;
  }

  detail::free_block allocate_chunk(std::size_t, cuda_stream_view stream)
  {
    try {
      return take_upstream(stream);
    } catch (std::bad_alloc const& e) {
      GPUMEM_FAIL(out_of_memory,
                  detail::format(resource_name, ": cannot grow by ", blocks_to_preallocate_,
                                 " blocks of ", detail::bytes_str(block_size_), ": ",
                                 this->describe_state(), "; upstream: ", e.what()));
    }
  }

  detail::free_block take_upstream(cuda_stream_view stream)
  {
    auto const bytes = block_size_ * blocks_to_preallocate_;
    void* ptr = gpumem::detail::async_allocate(upstream_, bytes, CUDA_ALLOCATION_ALIGNMENT, stream);
    return {static_cast<char*>(ptr), bytes, 0};
  }

  void deallocate_chunk(detail::free_block chunk) noexcept
  {
    gpumem::detail::async_deallocate(upstream_, chunk.ptr, chunk.size, CUDA_ALLOCATION_ALIGNMENT,
                                     cuda_stream_view{});
  }

  device_async_resource_ref upstream_;
  std::size_t block_size_;
  std::size_t blocks_to_preallocate_;
};

static_assert(gpumem::detail::async_resource_with<
              fixed_size_memory_resource<device_memory_resource>, cuda::mr::device_accessible>);

}  // namespace gpumem::mr
