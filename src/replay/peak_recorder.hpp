// The stack's memory layout at the first event where live bytes reach their peak, recorded while
// the replay runs and before the peak is known (src/replay only): a trace is replayed while it is
// still being read, so the replayer cannot wait for the profile to say where the peak is.
//
// How: at each new running maximum the recorder either takes a snapshot of the live blocks and
// the held chunks (when enough has changed since the last snapshot to pay for copying one) or just
// marks the position in its log of block and chunk changes made since the snapshot. The layout at
// the peak is the snapshot with the log applied up to the mark. When the log runs past the mark by
// more than a snapshot costs, the layout at the mark is computed then ("settled") and the log
// dropped; the next maximum takes a fresh snapshot. Every snapshot is paid for by at least as many
// logged changes as it copies: O(1) amortized per event, memory O(largest snapshot).
//
// Invariants: logging_ => log_ holds every change since the snapshot (blocks_, chunks_), and
// mark_ <= log_.size(); have_peak_ && !logging_ => settled_ is the layout at the peak.
// Thread safety: none; the replayer calls it from the thread that holds the replay's turn.
#pragma once

#include "memory_layout.hpp"

#include <gpumem/runtime/metered_runtime.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace gpumem::trace {

class peak_recorder final : public chunk_observer {
 public:
  /// What the replayer knows of the moment without looking at the layout.
  struct moment {
    std::size_t held_bytes{};
    std::size_t live_bytes{};
    std::size_t live_blocks{};
  };

  /// How the layout counts each block's slack (must outlive the recorder).
  void grant(grant_fn const& granted) noexcept { granted_ = &granted; }
  /// Lay out adjacent chunks as one range (the stack maps virtual memory; see join_adjacent).
  void join_adjacent_chunks(bool join) noexcept { join_ = join; }

  /// False while no log is kept: the replayer may skip reporting block changes.
  [[nodiscard]] bool logging() const noexcept { return logging_; }
  void block_added(address_range b) { log({b, change::add_block}); }
  void block_removed(address_range b) { log({b, change::remove_block}); }
  void chunk_added(std::uintptr_t address, std::size_t bytes) noexcept override
  {
    log_noexcept({{address, bytes}, change::add_chunk});
  }
  void chunk_removed(std::uintptr_t address, std::size_t bytes) noexcept override
  {
    log_noexcept({{address, bytes}, change::remove_chunk});
  }

  /// Live bytes reached a new maximum at `now`. `snapshot_cost`: the entries a snapshot would
  /// visit; take(blocks, chunks) appends the live blocks and held chunks of this moment (called
  /// only when a snapshot is due).
  template <class Take>
  void new_peak(moment now, std::size_t snapshot_cost, Take&& take)
  {
    peak_      = now;
    have_peak_ = true;
    if (logging_ && log_.size() < budget_) {
      mark_ = log_.size();
      return;
    }
    blocks_.clear();
    chunks_.clear();
    take(blocks_, chunks_);
    log_.clear();
    mark_    = 0;
    logging_ = true;
    budget_  = std::max(snapshot_cost, min_budget);
  }

  /// The layout at the last new_peak(); a default memory_state when there was none.
  [[nodiscard]] memory_state at_peak() const;

 private:
  enum class change : std::uint8_t { add_block, remove_block, add_chunk, remove_chunk };
  struct entry {
    address_range range;
    change what;
  };
  static constexpr std::size_t min_budget = 64;

  void log(entry e)
  {
    if (!logging_) { return; }
    log_.push_back(e);
    if (log_.size() - mark_ > budget_) { settle(); }
  }
  /// For the meter's callbacks: when host memory runs out the record is dropped (at_peak() then
  /// reports the next peak, or nothing) rather than corrupting the meter.
  void log_noexcept(entry e) noexcept;
  /// Computes the layout at the mark and drops the log.
  void settle();
  /// The snapshot with the first `n` logged changes applied, laid out.
  [[nodiscard]] memory_state replay_log(std::size_t n) const;

  grant_fn const* granted_{};
  bool join_{};
  bool logging_{};
  bool have_peak_{};
  moment peak_;
  std::vector<address_range> blocks_;  ///< snapshot: live blocks
  std::vector<address_range> chunks_;  ///< snapshot: held chunks, address-ordered
  std::vector<entry> log_;
  std::size_t mark_{};    ///< log_[0, mark_) happened up to the peak
  std::size_t budget_{};  ///< log entries past the mark before settling
  memory_state settled_;
};

}  // namespace gpumem::trace
