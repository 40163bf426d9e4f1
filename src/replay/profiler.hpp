// The profiling half of a trace pass (src/replay only): turns parsed events into compact events
// (pointers -> dense slots, anomalies resolved, see replay.hpp) while counting what a trace_profile
// reports: the allocation log (when each allocate was made and freed), live bytes and time sampled
// over the events, and the call stacks of the Frames column, interned.
//
// Invariants: live_ == sum of the sizes in map_; map_.size() + free_slots_.size() == next_slot_;
// p_.peak_live_bytes == the largest live_ seen after any event.
// Thread safety: none (one profiler per pass, used by one thread).
#pragma once

#include <gpumem/trace/compact_trace.hpp>
#include <gpumem/trace/pointer_map.hpp>
#include <gpumem/replay/replay.hpp>
#include <gpumem/trace/trace_event.hpp>

#include "timeline_sampler.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace gpumem::trace {

class profiler {
 public:
  /// Timelines sampled as a replay with default options samples them.
  explicit profiler(trace_profile& p) : p_{p}, timeline_{replay_options{}.timeline_points} {}

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
  /// Records an allocate (into `slot`) in the allocation log.
  void log_allocate(event const& e, std::uint32_t slot);
  /// Marks the block in `slot` freed at the current event.
  void log_free(std::uint32_t slot);
  /// The index of the stack written as `frames` (interned); -1 when empty.
  std::int32_t stack_of(std::string const& frames);
  std::uint32_t frame_of(std::string_view frame);

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
  std::vector<std::uint64_t> record_of_slot_;  ///< slot -> index in p_.allocation_log
  timeline_sampler<2> timeline_;               ///< live bytes, time since the first event
  std::uint64_t first_time_{};
  std::uint64_t last_time_{};
  std::unordered_map<std::string, std::int32_t> stack_index_;   ///< Frames text -> stack
  std::unordered_map<std::string, std::uint32_t> frame_index_;  ///< frame text -> frame
};

}  // namespace gpumem::trace
