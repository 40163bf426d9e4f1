// gpumem/detail/pinned_ring.hpp — a ring of slots of pinned host memory through which the host
// and the device take turns (not API): the offload of a pool to a file copies device -> slot on a
// stream while the host writes the slot before it to the file, and back the other way on resume.
//
//   pinned_ring ring{rt, staging, slot_bytes, slots};   // creates one event per slot
//   auto const i = ring.take();       // the next turn; ring.slot(i) is its memory
//   ring.wait(i);                     // until the copy recorded on that slot last is done
//   rt.memcpy_async(ring.slot(i), device, n, stream);
//   ring.record(i, stream);           // the copy just queued on that slot
//
// Invariant: every slot has an event; recorded_[s] says whether a copy was recorded on slot s
// since the last wait on it. Thread safety: none.
#pragma once

#include <gpumem/detail/runtime.hpp>

#include <cstddef>
#include <vector>

namespace gpumem::detail {

class pinned_ring {
 public:
  /// `slots` slots of `slot_bytes` each from `base` (pinned host memory the caller holds).
  /// Throws cuda_error when an event cannot be created (none is kept then).
  pinned_ring(runtime& rt, void* base, std::size_t slot_bytes, std::size_t slots)
      : runtime_{&rt}, base_{static_cast<char*>(base)}, slot_bytes_{slot_bytes}
  {
    events_.reserve(slots);
    recorded_.assign(slots, false);
    try {
      for (std::size_t i = 0; i < slots; ++i) { events_.push_back(rt.event_create()); }
    } catch (...) {
      destroy();
      throw;
    }
  }
  ~pinned_ring() { destroy(); }
  pinned_ring(pinned_ring const&)            = delete;
  pinned_ring& operator=(pinned_ring const&) = delete;

  [[nodiscard]] std::size_t slot_bytes() const noexcept { return slot_bytes_; }
  [[nodiscard]] std::size_t slots() const noexcept { return events_.size(); }
  /// The next turn (0, 1, 2, ...); turn i uses slot i mod slots().
  [[nodiscard]] std::size_t take() noexcept { return turn_++; }
  [[nodiscard]] char* slot(std::size_t turn) const noexcept
  {
    return base_ + (turn % slots()) * slot_bytes_;
  }
  /// Waits until the copy last recorded on turn's slot is done (returns at once when none is).
  void wait(std::size_t turn)
  {
    auto const s = turn % slots();
    if (!recorded_[s]) { return; }
    runtime_->event_synchronize(events_[s]);
    recorded_[s] = false;
  }
  /// Records, on `stream`, the end of the copy just queued on turn's slot.
  void record(std::size_t turn, cudaStream_t stream)
  {
    auto const s = turn % slots();
    runtime_->event_record(events_[s], stream);
    recorded_[s] = true;
  }

 private:
  void destroy() noexcept
  {
    for (auto e : events_) { runtime_->event_destroy(e); }
    events_.clear();
  }

  runtime* runtime_;
  char* base_;
  std::size_t slot_bytes_;
  std::vector<cudaEvent_t> events_;
  std::vector<bool> recorded_;
  std::size_t turn_{};
};

}  // namespace gpumem::detail
