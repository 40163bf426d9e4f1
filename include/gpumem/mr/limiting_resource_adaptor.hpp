// gpumem/mr/limiting_resource_adaptor.hpp — caps the bytes allocated through it.
//
// Each allocation is charged align_up(bytes, alignment) against `allocation_limit`. The charge is
// reserved with a compare-and-swap before the upstream is asked, so the allocated bytes never
// exceed the limit, even for an instant, however many threads allocate; a failed upstream call
// gives the reservation back. Allocations made before the adaptor existed are not counted.
//
// Invariant: 0 <= allocated_bytes <= allocation_limit, and allocated_bytes == sum of the charges
// of live allocations (charges in flight included: get_allocated_bytes may count an allocation
// whose upstream call has not returned yet).
// Thread safety: thread-safe if the upstream is (the accounting is one atomic).
// Throws: logic_error for a null upstream or a non-power-of-two alignment; out_of_memory when the
// limit would be exceeded (says asked, allocated and limit); whatever the upstream throws.
// Bad frees: the adaptor records its live allocations (detail::live_allocations), so a double
// free, a wrong size or a foreign pointer never changes the charge wrongly: a wrong size is
// reported, counted in bad_deallocations() and freed as allocated; a pointer not live here is
// passed upstream with the charge unchanged (counted in untracked_deallocations()).
#pragma once

#include <gpumem/align.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/live_allocations.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/resource_ref.hpp>

#include <atomic>
#include <cstddef>
#include <memory>

namespace gpumem::mr {

template <typename Upstream>
class limiting_resource_adaptor
    : public device_memory_resource,
      public gpumem::detail::forward_properties<limiting_resource_adaptor<Upstream>, Upstream> {
 public:
  limiting_resource_adaptor(device_async_resource_ref upstream, std::size_t allocation_limit,
                            std::size_t alignment = CUDA_ALLOCATION_ALIGNMENT)
      : upstream_{upstream},
        allocation_limit_{allocation_limit},
        alignment_{alignment},
        allocated_bytes_{std::make_unique<std::atomic<std::size_t>>(0)},
        live_{std::make_unique<detail::live_allocations>()}
  {
    GPUMEM_EXPECTS(is_supported_alignment(alignment), logic_error,
                   detail::format("limiting_resource_adaptor: alignment must be a power of two, "
                                  "got ",
                                  alignment));
  }

  /// Throws logic_error when `upstream` is null.
  limiting_resource_adaptor(Upstream* upstream, std::size_t allocation_limit,
                            std::size_t alignment = CUDA_ALLOCATION_ALIGNMENT)
      : limiting_resource_adaptor{to_device_async_resource_ref_checked(upstream), allocation_limit,
                                  alignment}
  {
    this->link_upstream(upstream);
  }

  limiting_resource_adaptor(limiting_resource_adaptor&&) noexcept            = default;
  limiting_resource_adaptor& operator=(limiting_resource_adaptor&&) noexcept = default;
  limiting_resource_adaptor(limiting_resource_adaptor const&)                = delete;
  limiting_resource_adaptor& operator=(limiting_resource_adaptor const&)     = delete;
  ~limiting_resource_adaptor() override                                      = default;

  [[nodiscard]] device_async_resource_ref get_upstream_resource() const noexcept
  {
    return upstream_;
  }

  /// Bytes currently charged (each allocation rounded up to the alignment).
  [[nodiscard]] std::size_t get_allocated_bytes() const { return allocated_bytes_->load(); }

  /// The most bytes this adaptor lets be allocated at once (not what the device can hold).
  [[nodiscard]] std::size_t get_allocation_limit() const { return allocation_limit_; }

  /// Deallocates of a live allocation with a wrong size (reported; the right size was freed).
  [[nodiscard]] std::uint64_t bad_deallocations() const noexcept
  {
    return live_->bad_deallocations();
  }
  /// Deallocates of pointers not allocated through this adaptor (or already freed): passed
  /// upstream, not charged.
  [[nodiscard]] std::uint64_t untracked_deallocations() const noexcept
  {
    return live_->untracked_deallocations();
  }

  /// Throws logic_error when allocated bytes exceed the limit.
  void check_invariants() const
  {
    auto const allocated = get_allocated_bytes();
    GPUMEM_EXPECTS(allocated <= allocation_limit_, logic_error,
                   detail::format("limiting_resource_adaptor: ", allocated,
                                  " bytes allocated exceed the limit of ", allocation_limit_));
  }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    std::size_t const charge = charge_of(bytes);
    reserve(bytes, charge);
    void* ptr = nullptr;
    try {
      ptr = gpumem::detail::async_allocate(upstream_, bytes, CUDA_ALLOCATION_ALIGNMENT, stream);
      live_->insert(ptr, bytes);
    } catch (...) {
      if (ptr != nullptr) {
        gpumem::detail::async_deallocate(upstream_, ptr, bytes, CUDA_ALLOCATION_ALIGNMENT, stream);
      }
      allocated_bytes_->fetch_sub(charge);
      throw;
    }
    return ptr;
  }

  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    auto const allocated = live_->take(ptr, bytes, "limiting_resource_adaptor");
    gpumem::detail::async_deallocate(upstream_, ptr, allocated.value_or(bytes),
                                     CUDA_ALLOCATION_ALIGNMENT, stream);
    if (allocated) { allocated_bytes_->fetch_sub(charge_of(*allocated)); }
  }

  [[nodiscard]] std::size_t charge_of(std::size_t bytes) const noexcept
  {
    return can_align_up(bytes, alignment_) ? align_up(bytes, alignment_) : SIZE_MAX;
  }

  /// Adds `charge` to the allocated bytes unless that would pass the limit (then throws).
  void reserve(std::size_t bytes, std::size_t charge)
  {
    auto& allocated     = *allocated_bytes_;
    std::size_t current = allocated.load();
    do {
      if (charge > allocation_limit_ || current > allocation_limit_ - charge) {
        throw_over_limit(bytes, current);
      }
    } while (!allocated.compare_exchange_weak(current, current + charge));
  }

  [[noreturn]] void throw_over_limit(std::size_t bytes, std::size_t current) const
  {
    GPUMEM_FAIL(
        out_of_memory,
        detail::format("limiting_resource_adaptor: cannot allocate ", detail::bytes_str(bytes),
                       ": ", detail::bytes_str(current), " already allocated of a limit of ",
                       detail::bytes_str(allocation_limit_)));
  }

  device_async_resource_ref upstream_;
  std::size_t allocation_limit_;
  std::size_t alignment_;
  std::unique_ptr<std::atomic<std::size_t>> allocated_bytes_;  // in a box so the adaptor moves
  std::unique_ptr<detail::live_allocations> live_;  // what allocated_bytes_ charges, by pointer
};

static_assert(gpumem::detail::async_resource_with<limiting_resource_adaptor<device_memory_resource>,
                                                  cuda::mr::device_accessible>);

}  // namespace gpumem::mr
