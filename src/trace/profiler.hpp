// The profiling half of a trace pass (src/trace only): turns parsed events into compact events
// (pointers -> dense slots, anomalies resolved, see replay.hpp) while counting what a trace_profile
// reports.
//
// Invariants: live_ == sum of the sizes in map_; map_.size() + free_slots_.size() == next_slot_;
// p_.peak_live_bytes == the largest live_ seen after any event.
// Thread safety: none (one profiler per pass, used by one thread).
#pragma once

#include <gpumem/trace/compact_trace.hpp>
#include <gpumem/trace/pointer_map.hpp>
#include <gpumem/trace/replay.hpp>
#include <gpumem/trace/trace_event.hpp>

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace gpumem::trace {

class profiler {
 public:
  explicit profiler(trace_profile& p) : p_{p} {}

  /// Profiles `e` and returns its compact form (not stored: the caller keeps it).
  [[nodiscard]] compact_event apply(event const& e);
  /// Ends the pass: the blocks still live and the slot count go into the profile.
  void finish();

 private:
  struct block {
    std::uint64_t size;
    std::uint32_t slot;
  };

  /// The index of `id` in `ids` (appended when new), found through `index` in O(1) whatever the
  /// number of distinct ids; `last` caches the previous answer.
  std::uint16_t index_of(std::vector<std::uint64_t>& ids,
                         std::unordered_map<std::uint64_t, std::uint16_t>& index, std::uint64_t id,
                         std::size_t& last, char const* what);
  void allocate(event const& e, compact_event& c);
  void free(event const& e, compact_event& c);

  trace_profile& p_;
  std::uint64_t line_{};    ///< line of the event being profiled
  pointer_map<block> map_;  ///< traced pointer -> its size and slot
  std::vector<std::uint32_t> free_slots_;
  std::uint32_t next_slot_{};
  std::size_t live_{};
  std::size_t last_thread_{};
  std::size_t last_stream_{};
  std::unordered_map<std::uint64_t, std::uint16_t> thread_index_;  ///< p_.threads[i] -> i
  std::unordered_map<std::uint64_t, std::uint16_t> stream_index_;  ///< p_.streams[i] -> i
};

}  // namespace gpumem::trace
