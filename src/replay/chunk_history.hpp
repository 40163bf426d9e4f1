// When each chunk a stack held was taken and given back, by event (src/replay only): an observer of
// the metered_runtime that records every chunk with the replay's current event and passes each
// change on to the next observer (the peak_recorder).
//
// Memory: one record per chunk taken, at most max_recorded_allocations; past that (or when host
// memory runs out) the history is dropped and omitted() says so, the next observer still told.
// Invariants: open_ maps the address of every chunk held now to its record in chunks_.
// Thread safety: none; the meter calls it under its lock, from the thread that holds the replay's
// turn.
#pragma once

#include "memory_layout.hpp"

#include <gpumem/runtime/metered_runtime.hpp>
#include <gpumem/replay/replay.hpp>

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace gpumem::trace {

class chunk_history final : public chunk_observer {
 public:
  /// `event`: the replay's event counter (read at each change); `next`: told of every change.
  chunk_history(std::uint64_t const& event, chunk_observer& next) : event_{&event}, next_{&next} {}

  /// The chunks held before the first event (from event 0).
  void start(std::vector<address_range> const& held) noexcept
  {
    for (auto const& [address, bytes] : held) { record_added(address, bytes); }
  }

  void chunk_added(std::uintptr_t address, std::size_t bytes) noexcept override
  {
    next_->chunk_added(address, bytes);
    record_added(address, bytes);
  }

  void chunk_removed(std::uintptr_t address, std::size_t bytes) noexcept override
  {
    next_->chunk_removed(address, bytes);
    if (omitted_) { return; }
    if (auto it = open_.find(address); it != open_.end()) {
      chunks_[it->second].to_event = static_cast<std::int64_t>(*event_);
      open_.erase(it);
    }
  }

  [[nodiscard]] bool omitted() const noexcept { return omitted_; }
  [[nodiscard]] std::vector<held_chunk> take() { return std::move(chunks_); }

 private:
  void record_added(std::uintptr_t address, std::size_t bytes) noexcept
  {
    if (omitted_) { return; }
    try {
      if (chunks_.size() >= max_recorded_allocations) { throw std::bad_alloc{}; }
      open_[address] = chunks_.size();
      chunks_.push_back({address, bytes, *event_, -1});
    } catch (...) {
      omitted_ = true;
      chunks_  = {};
      open_    = {};
    }
  }

  std::uint64_t const* event_;
  chunk_observer* next_;
  std::vector<held_chunk> chunks_;
  std::unordered_map<std::uintptr_t, std::size_t> open_;
  bool omitted_{};
};

}  // namespace gpumem::trace
