// gpumem/mr/tracking_resource_adaptor.hpp — remembers every live allocation, to find leaks.
//
// Keeps a map pointer -> allocation_info (size and, with `capture_stacks`, the call stack of the
// allocation) and the sum of live bytes. get_outstanding_allocations_str() is the leak report:
// one entry per live allocation naming its pointer and size, followed by its stack when captured.
// log_outstanding_allocations() writes that report at debug level, when there is anything
// outstanding: to the debug sink chosen with set_debug_sink(), and nowhere when none is set (as a
// debug-level log is off by default); log_outstanding_allocations(os) writes it to `os`.
// Allocations made before the adaptor existed are not tracked; freeing one is forwarded upstream
// untracked (so is a double free: the upstream reports it). A live pointer freed with a wrong size
// is reported, counted in bad_deallocations() and freed with the size it was allocated with. A
// debug adaptor: every call takes a lock, stacks cost more. Stack frames are named when written
// (detail::stack_trace: file and line from debug information). write_outstanding_trace() writes
// the live allocations as a trace (the replay tool's CSV, with their call stacks in the Frames
// column when captured), so that a leak can be looked at in `gpumem replay`'s report.
//
// Invariant: allocated_bytes == sum of allocation_size over outstanding allocations.
// Thread safety: all members are thread-safe (a shared_mutex guards the map).
// Throws: logic_error for a null upstream; whatever the upstream throws (nothing is recorded then).
#pragma once

#include <gpumem/detail/diagnostics/allocation_logger.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/live_allocations.hpp>
#include <gpumem/detail/diagnostics/stack_trace.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/resource_ref.hpp>
#include <gpumem/trace/trace_event.hpp>
#include <gpumem/trace/trace_writer.hpp>

#include <atomic>
#include <cstddef>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <string>

namespace gpumem::mr {

template <typename Upstream>
class tracking_resource_adaptor
    : public device_memory_resource,
      public gpumem::detail::forward_properties<tracking_resource_adaptor<Upstream>, Upstream> {
 public:
  using read_lock_t  = std::shared_lock<std::shared_mutex>;
  using write_lock_t = std::unique_lock<std::shared_mutex>;

  /// What is known about one live allocation.
  struct allocation_info {
    std::unique_ptr<detail::stack_trace> strace;  ///< the allocating stack, or null
    std::size_t allocation_size;                  ///< bytes asked for

    allocation_info(std::size_t size, bool capture_stack)
        : strace{capture_stack ? std::make_unique<detail::stack_trace>() : nullptr},
          allocation_size{size}
    {
    }
  };

  tracking_resource_adaptor(device_async_resource_ref upstream, bool capture_stacks = false)
      : upstream_{upstream}, capture_stacks_{capture_stacks}, state_{std::make_unique<state>()}
  {
  }

  /// Throws logic_error when `upstream` is null.
  tracking_resource_adaptor(Upstream* upstream, bool capture_stacks = false)
      : tracking_resource_adaptor{to_device_async_resource_ref_checked(upstream), capture_stacks}
  {
    this->link_upstream(upstream);
  }

  tracking_resource_adaptor(tracking_resource_adaptor&&) noexcept            = default;
  tracking_resource_adaptor& operator=(tracking_resource_adaptor&&) noexcept = default;
  tracking_resource_adaptor(tracking_resource_adaptor const&)                = delete;
  tracking_resource_adaptor& operator=(tracking_resource_adaptor const&)     = delete;
  ~tracking_resource_adaptor() override                                      = default;

  [[nodiscard]] device_async_resource_ref get_upstream_resource() const noexcept
  {
    return upstream_;
  }

  /// The live allocations. Not synchronized: read it while no other thread allocates or frees.
  [[nodiscard]] std::map<void*, allocation_info> const& get_outstanding_allocations() const noexcept
  {
    return state_->allocations;
  }

  /// Sum of the sizes of the live allocations.
  /// Deallocates of a live allocation with a wrong size (reported; freed as allocated).
  [[nodiscard]] std::uint64_t bad_deallocations() const noexcept
  {
    return state_->bad_deallocations.load();
  }

  [[nodiscard]] std::size_t get_allocated_bytes() const noexcept
  {
    return state_->allocated_bytes.load();
  }

  /// The leak report: "Outstanding allocations: <n>, <bytes> in total" then, per allocation,
  /// "<ptr>: <size>" and, when stacks were captured, the stack indented below it.
  [[nodiscard]] std::string get_outstanding_allocations_str() const
  {
    read_lock_t lock{state_->mutex};
    std::ostringstream out;
    out << "Outstanding allocations: " << state_->allocations.size() << ", "
        << detail::bytes_str(state_->allocated_bytes.load()) << " in total\n";
    for (auto const& [ptr, info] : state_->allocations) {
      out << detail::ptr_str(ptr) << ": " << detail::bytes_str(info.allocation_size) << "\n";
      if (info.strace) { out << *info.strace; }
    }
    return out.str();
  }

  /// The live allocations as a trace: the header with the Frames column, then one "allocate" row
  /// per allocation in address order (Thread 0, Time 0, Stream 0), its call stack in Frames
  /// (empty unless stacks were captured).
  void write_outstanding_trace(std::ostream& os) const
  {
    read_lock_t lock{state_->mutex};
    os << trace::csv_frames_header << '\n';
    for (auto const& [ptr, info] : state_->allocations) {
      os << detail::format_log_line(0, 0, "allocate", ptr, info.allocation_size, cudaStream_t{});
      os << ','
         << (info.strace ? trace::frames_field(info.strace->joined(trace::frame_separator)) : "")
         << '\n';
    }
  }

  /// Where log_outstanding_allocations() writes; null (the default) turns it off. The stream
  /// must outlive its use here.
  void set_debug_sink(std::ostream* os) noexcept { state_->debug_sink.store(os); }
  [[nodiscard]] std::ostream* get_debug_sink() const noexcept { return state_->debug_sink.load(); }

  /// Writes the leak report to the debug sink, if one is set and any allocation is outstanding.
  void log_outstanding_allocations() const
  {
    if (auto* os = get_debug_sink(); os != nullptr) { log_outstanding_allocations(*os); }
  }

  /// Writes the leak report to `os` if any allocation is outstanding.
  void log_outstanding_allocations(std::ostream& os) const
  {
    if (get_outstanding_allocations_count() == 0) { return; }
    os << get_outstanding_allocations_str() << std::flush;
  }

  /// Throws logic_error unless allocated bytes == the sum of the outstanding sizes.
  void check_invariants() const
  {
    read_lock_t lock{state_->mutex};
    std::size_t sum = 0;
    for (auto const& [ptr, info] : state_->allocations) { sum += info.allocation_size; }
    GPUMEM_EXPECTS(
        sum == state_->allocated_bytes.load(), logic_error,
        detail::format("tracking_resource_adaptor: allocated bytes ",
                       state_->allocated_bytes.load(), " != sum of outstanding sizes ", sum));
  }

 private:
  struct state {
    std::shared_mutex mutex;
    std::map<void*, allocation_info> allocations;
    std::atomic<std::size_t> allocated_bytes{0};
    std::atomic<std::uint64_t> bad_deallocations{0};
    std::atomic<std::ostream*> debug_sink{nullptr};  ///< log_outstanding_allocations() target
  };

  [[nodiscard]] std::size_t get_outstanding_allocations_count() const
  {
    read_lock_t lock{state_->mutex};
    return state_->allocations.size();
  }

  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    void* ptr = gpumem::detail::async_allocate(upstream_, bytes, CUDA_ALLOCATION_ALIGNMENT, stream);
    try {
      allocation_info info{bytes, capture_stacks_};  // captured outside the lock
      write_lock_t lock{state_->mutex};
      state_->allocations.emplace(ptr, std::move(info));
      state_->allocated_bytes += bytes;
    } catch (...) {
      gpumem::detail::async_deallocate(upstream_, ptr, bytes, CUDA_ALLOCATION_ALIGNMENT, stream);
      throw;
    }
    return ptr;
  }

  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    std::size_t allocated = bytes;
    {
      write_lock_t lock{state_->mutex};
      if (auto it = state_->allocations.find(ptr); it != state_->allocations.end()) {
        allocated = it->second.allocation_size;
        state_->allocated_bytes -= allocated;
        state_->allocations.erase(it);
      }
    }
    if (allocated != bytes) {
      detail::report_wrong_size_free("tracking_resource_adaptor", ptr, bytes, allocated,
                                     state_->bad_deallocations.fetch_add(1) + 1);
    }
    gpumem::detail::async_deallocate(upstream_, ptr, allocated, CUDA_ALLOCATION_ALIGNMENT, stream);
  }

  device_async_resource_ref upstream_;
  bool capture_stacks_;
  std::unique_ptr<state> state_;  // in a box so the adaptor moves
};

static_assert(gpumem::detail::async_resource_with<tracking_resource_adaptor<device_memory_resource>,
                                                  cuda::mr::device_accessible>);

}  // namespace gpumem::mr
