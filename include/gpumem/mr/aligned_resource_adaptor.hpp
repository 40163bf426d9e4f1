// gpumem/mr/aligned_resource_adaptor.hpp — allocations aligned to a larger power of two.
//
// Addresses from the upstream are 256-byte aligned. Some uses want more (GPUDirect Storage wants
// 4 KiB). For an allocation of at least `alignment_threshold` bytes this adaptor asks the upstream
// for `bytes + alignment - 256` bytes, returns the first `alignment`-aligned address inside, and
// remembers the upstream pointer to free it. Smaller allocations (and every allocation when
// `alignment` <= 256) pass straight through.
//
// Bad frees: a deallocate is matched by its pointer, not its size: an over-aligned block freed
// with a wrong size (even one below the threshold) still goes back as the upstream block it came
// from, reported and counted in bad_deallocations(); any other pointer passes straight through
// (the upstream judges it).
//
// Invariant: blocks_ holds exactly the live over-aligned allocations (aligned -> upstream ptr,
// size asked; detail::live_blocks, the bookkeeping the counting adaptors share).
// Thread safety: thread-safe if the upstream is (blocks_ is).
// Throws: logic_error for a null upstream or a non-power-of-two alignment; out_of_memory when the
// padded size overflows; whatever the upstream throws (nothing is recorded then).
#pragma once

#include <gpumem/align.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/live_allocations.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/resource_ref.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>

namespace gpumem::mr {

template <typename Upstream>
class aligned_resource_adaptor
    : public device_memory_resource,
      public gpumem::detail::forward_properties<aligned_resource_adaptor<Upstream>, Upstream> {
 public:
  /// Allocations smaller than this are not over-aligned (default: all are).
  static constexpr std::size_t default_alignment_threshold = 0;

  explicit aligned_resource_adaptor(device_async_resource_ref upstream,
                                    std::size_t alignment           = CUDA_ALLOCATION_ALIGNMENT,
                                    std::size_t alignment_threshold = default_alignment_threshold)
      : upstream_{upstream}, alignment_{alignment}, alignment_threshold_{alignment_threshold}
  {
    GPUMEM_EXPECTS(
        is_supported_alignment(alignment), logic_error,
        detail::format("aligned_resource_adaptor: alignment must be a power of two, got ",
                       alignment));
  }

  /// Throws logic_error when `upstream` is null.
  explicit aligned_resource_adaptor(Upstream* upstream,
                                    std::size_t alignment           = CUDA_ALLOCATION_ALIGNMENT,
                                    std::size_t alignment_threshold = default_alignment_threshold)
      : aligned_resource_adaptor{to_device_async_resource_ref_checked(upstream), alignment,
                                 alignment_threshold}
  {
    this->link_upstream(upstream);
  }

  [[nodiscard]] device_async_resource_ref get_upstream_resource() const noexcept
  {
    return upstream_;
  }
  [[nodiscard]] std::size_t alignment() const noexcept { return alignment_; }
  [[nodiscard]] std::size_t alignment_threshold() const noexcept { return alignment_threshold_; }
  /// Deallocates of an over-aligned block with a wrong size (reported; freed as allocated).
  [[nodiscard]] std::uint64_t bad_deallocations() const noexcept
  {
    return blocks_.bad_deallocations();
  }

 private:
  [[nodiscard]] bool passes_through(std::size_t bytes) const noexcept
  {
    return alignment_ <= CUDA_ALLOCATION_ALIGNMENT || bytes < alignment_threshold_;
  }

  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    if (passes_through(bytes)) { return upstream_allocate(bytes, stream); }
    std::size_t const padding = alignment_ - CUDA_ALLOCATION_ALIGNMENT;
    GPUMEM_EXPECTS(bytes <= SIZE_MAX - padding, out_of_memory,
                   detail::format("aligned_resource_adaptor: cannot allocate ", bytes,
                                  " bytes aligned to ", alignment_, ": size overflows"));
    void* raw = upstream_allocate(bytes + padding, stream);
    void* aligned =
        reinterpret_cast<void*>(align_up(reinterpret_cast<std::uintptr_t>(raw), alignment_));
    try {
      blocks_.insert(aligned, over_aligned{raw, bytes});
    } catch (...) {
      gpumem::detail::async_deallocate(upstream_, raw, bytes + padding, CUDA_ALLOCATION_ALIGNMENT,
                                       stream);
      throw;
    }
    return aligned;
  }

  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    std::optional<over_aligned> block;
    if (alignment_ > CUDA_ALLOCATION_ALIGNMENT) {  // a wrong size is reported by take()
      block = blocks_.take(ptr, bytes, "aligned_resource_adaptor");
    }
    if (!block) {
      gpumem::detail::async_deallocate(upstream_, ptr, bytes, CUDA_ALLOCATION_ALIGNMENT, stream);
      return;
    }
    std::size_t const padding = alignment_ - CUDA_ALLOCATION_ALIGNMENT;
    gpumem::detail::async_deallocate(upstream_, block->raw, block->bytes + padding,
                                     CUDA_ALLOCATION_ALIGNMENT, stream);
  }

  void* upstream_allocate(std::size_t bytes, cuda_stream_view stream)
  {
    return gpumem::detail::async_allocate(upstream_, bytes, CUDA_ALLOCATION_ALIGNMENT, stream);
  }

  device_async_resource_ref upstream_;
  std::size_t alignment_;
  std::size_t alignment_threshold_;
  struct over_aligned {
    void* raw;          ///< the upstream's pointer
    std::size_t bytes;  ///< the size asked (the upstream block is bytes + alignment - 256)
  };
  detail::live_blocks<over_aligned> blocks_;  // over-aligned ptr -> its upstream block
};

static_assert(gpumem::detail::async_resource_with<aligned_resource_adaptor<device_memory_resource>,
                                                  cuda::mr::device_accessible>);

}  // namespace gpumem::mr
