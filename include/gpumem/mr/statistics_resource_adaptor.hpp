// gpumem/mr/statistics_resource_adaptor.hpp — counts bytes and allocations: current, peak, total.
//
// Two counters (bytes, allocations), each with value (now), peak (largest value) and total (sum of
// everything added). Nested scopes: push_counters() starts a fresh pair of counters for a block of
// code; pop_counters() ends it and folds it into the enclosing pair, so an outer scope's numbers
// include its inner scopes' (the inner peak is shifted by the outer value when the inner began:
// outer.peak = max(outer.peak, outer.value + inner.peak)). A free inside a scope of memory taken
// before it lowers that scope's value below zero; that is expected. Allocations made before the
// adaptor existed are not counted. A debug adaptor: every call takes a lock.
// Bad frees: the adaptor records its live allocations (detail::live_allocations): a wrong size is
// reported, counted in bad_deallocations() and counted off (and freed) as allocated; a pointer
// not live here (a double free, a foreign pointer) is passed upstream and leaves the counters
// alone (untracked_deallocations()). So the bottom pair's values never go below zero.
//
// Invariant: counters_ is never empty (the bottom pair lives as long as the adaptor); for each
// counter, peak >= value and total >= peak when no free crossed a scope.
// Thread safety: all members are thread-safe (a shared_mutex guards the stack).
// Throws: logic_error for a null upstream; std::out_of_range from pop_counters() with no pushed
// scope; whatever the upstream throws (counters are then unchanged).
#pragma once

#include <gpumem/detail/live_allocations.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/resource_ref.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <utility>
#include <vector>

namespace gpumem::mr {

template <typename Upstream>
class statistics_resource_adaptor
    : public device_memory_resource,
      public gpumem::detail::forward_properties<statistics_resource_adaptor<Upstream>, Upstream> {
 public:
  using read_lock_t  = std::shared_lock<std::shared_mutex>;
  using write_lock_t = std::unique_lock<std::shared_mutex>;

  /// The current, peak and total value of a count.
  struct counter {
    std::int64_t value{0};  ///< current value
    std::int64_t peak{0};   ///< largest value reached
    std::int64_t total{0};  ///< sum of every value added

    counter& operator+=(std::int64_t val)
    {
      value += val;
      total += val;
      peak = std::max(value, peak);
      return *this;
    }

    counter& operator-=(std::int64_t val)
    {
      value -= val;
      return *this;
    }

    /// Folds in a counter that tracked a block inside the block this one tracks.
    void add_counters_from_tracked_sub_block(counter const& val)
    {
      peak = std::max(value + val.peak, peak);
      value += val.value;
      total += val.total;
    }
  };

  statistics_resource_adaptor(device_async_resource_ref upstream)
      : upstream_{upstream}, state_{std::make_unique<state>()}
  {
  }

  /// Throws logic_error when `upstream` is null.
  statistics_resource_adaptor(Upstream* upstream)
      : statistics_resource_adaptor{to_device_async_resource_ref_checked(upstream)}
  {
    this->link_upstream(upstream);
  }

  statistics_resource_adaptor(statistics_resource_adaptor&&) noexcept            = default;
  statistics_resource_adaptor& operator=(statistics_resource_adaptor&&) noexcept = default;
  statistics_resource_adaptor(statistics_resource_adaptor const&)                = delete;
  statistics_resource_adaptor& operator=(statistics_resource_adaptor const&)     = delete;
  ~statistics_resource_adaptor() override                                        = default;

  [[nodiscard]] device_async_resource_ref get_upstream_resource() const noexcept
  {
    return upstream_;
  }

  /// Bytes counted by the innermost scope.
  [[nodiscard]] counter get_bytes_counter() const noexcept
  {
    read_lock_t lock{state_->mutex};
    return state_->counters.back().first;
  }

  /// Allocation calls counted by the innermost scope.
  [[nodiscard]] counter get_allocations_counter() const noexcept
  {
    read_lock_t lock{state_->mutex};
    return state_->counters.back().second;
  }

  /// Deallocates of a live allocation with a wrong size (reported; counted as allocated).
  [[nodiscard]] std::uint64_t bad_deallocations() const noexcept
  {
    return state_->live.bad_deallocations();
  }
  /// Deallocates of pointers not allocated through this adaptor (or already freed): not counted.
  [[nodiscard]] std::uint64_t untracked_deallocations() const noexcept
  {
    return state_->live.untracked_deallocations();
  }

  /// Starts a scope with zeroed counters; returns the (bytes, allocations) pair before the push.
  std::pair<counter, counter> push_counters()
  {
    write_lock_t lock{state_->mutex};
    auto before = state_->counters.back();
    state_->counters.emplace_back();
    return before;
  }

  /// Throws logic_error unless the stack holds the bottom pair and every peak >= its value.
  void check_invariants() const
  {
    read_lock_t lock{state_->mutex};
    GPUMEM_EXPECTS(!state_->counters.empty(), logic_error,
                   "statistics_resource_adaptor: the counter stack is empty");
    for (auto const& [bytes, count] : state_->counters) {
      GPUMEM_EXPECTS(bytes.peak >= bytes.value && count.peak >= count.value, logic_error,
                     "statistics_resource_adaptor: a counter's value exceeds its peak");
    }
  }

  /// Ends the innermost scope, folds it into the enclosing one and returns it.
  /// Throws std::out_of_range when no scope was pushed.
  std::pair<counter, counter> pop_counters()
  {
    write_lock_t lock{state_->mutex};
    auto& stack = state_->counters;
    if (stack.size() < 2) {
      throw std::out_of_range{"statistics_resource_adaptor::pop_counters: no counters were pushed"};
    }
    auto popped = stack.back();
    stack.pop_back();
    stack.back().first.add_counters_from_tracked_sub_block(popped.first);
    stack.back().second.add_counters_from_tracked_sub_block(popped.second);
    return popped;
  }

 private:
  struct state {
    std::shared_mutex mutex;
    std::vector<std::pair<counter, counter>> counters{1};  // (bytes, allocations); never empty
    detail::live_allocations live;                         // what the counters count
  };

  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    void* ptr = gpumem::detail::async_allocate(upstream_, bytes, CUDA_ALLOCATION_ALIGNMENT, stream);
    try {
      state_->live.insert(ptr, bytes);
    } catch (...) {
      gpumem::detail::async_deallocate(upstream_, ptr, bytes, CUDA_ALLOCATION_ALIGNMENT, stream);
      throw;
    }
    write_lock_t lock{state_->mutex};
    state_->counters.back().first += static_cast<std::int64_t>(bytes);
    state_->counters.back().second += 1;
    return ptr;
  }

  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    auto const allocated = state_->live.take(ptr, bytes, "statistics_resource_adaptor");
    gpumem::detail::async_deallocate(upstream_, ptr, allocated.value_or(bytes),
                                     CUDA_ALLOCATION_ALIGNMENT, stream);
    if (!allocated) { return; }
    write_lock_t lock{state_->mutex};
    state_->counters.back().first -= static_cast<std::int64_t>(*allocated);
    state_->counters.back().second -= 1;
  }

  device_async_resource_ref upstream_;
  std::unique_ptr<state> state_;  // in a box so the adaptor moves
};

static_assert(gpumem::detail::async_resource_with<
              statistics_resource_adaptor<device_memory_resource>, cuda::mr::device_accessible>);

}  // namespace gpumem::mr
