// The replay engine behind trace::replay() and trace::profile_and_replay() (src/replay only).
//
// A replayer applies compact events to a stack, chunk by chunk, from an event_source: the
// profiled trace's file, or the profiling pipeline while it still reads the trace. It needs nothing
// known in advance: slots and streams grow as they appear, the timeline's spans double as the
// trace goes on (timeline_sampler), the layout at the peak is recorded by a peak_recorder, and
// where each block went and when each chunk was held are recorded as they happen (the layout
// history of the report).
//
// Invariants: live_ == sum of sizes of occupied slots; live_blocks_ == number of occupied slots;
// every occupied slot holds a block allocated from top_ and not yet deallocated;
// addresses_[k] is the block of the k-th allocate applied (until max_recorded_allocations);
// peak_live_ == the largest live_ after any event applied.
// Thread safety: apply() is called by one thread at a time (run_threads() passes a turn between
// threads with acquire/release, so each call happens-after the previous one).
#pragma once

#include "chunk_history.hpp"
#include "peak_recorder.hpp"
#include "timeline_sampler.hpp"

#include <gpumem/trace/pointer_map.hpp>
#include <gpumem/replay/replay.hpp>

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace gpumem::trace {

/// Where a serial replay reads its events.
class event_source {
 public:
  /// The next run of events into `out` (valid until the next call); false at the end.
  virtual bool next(std::span<compact_event const>& out) = 0;
  /// Trace stream ids by index: covers every index in the events returned so far.
  [[nodiscard]] virtual std::span<std::uint64_t const> stream_ids() const = 0;
  /// Reports how far the source has come.
  virtual void report(replay_progress const& progress) const = 0;

 protected:
  ~event_source() = default;
};

class replayer {
 public:
  replayer(std::string const& trace, mr::device_memory_resource& top, std::string const& name,
           spec::footprint_source const* footprint, metered_runtime& meter,
           replay_options const& options);
  /// Gives back every block still live and stops observing the meter.
  ~replayer();
  replayer(replayer const&)            = delete;
  replayer& operator=(replayer const&) = delete;

  /// Replays every event of `source` on this thread.
  replay_result run(event_source& source);
  /// Replays `profile` with one host thread per trace thread, in the trace's order.
  replay_result run_threads(trace_profile const& profile);

 private:
  struct stop_replay {};
  struct threaded_state;

  void start();
  replay_result finish();
  void thread_main(threaded_state& st, std::uint16_t me);
  bool run_thread_chunk(threaded_state& st, std::uint16_t me);
  void map_streams(std::span<std::uint64_t const> ids);
  void apply(compact_event const& e);
  void allocate(compact_event const& e, cudaStream_t s);
  void free(compact_event const& e, cudaStream_t s);
  void deallocate(live_block const& b, cudaStream_t s) noexcept;
  void sample(bool grew);
  void note_peak();
  void* timed_allocate(std::size_t bytes, cudaStream_t s);
  void fail(compact_event const& e, char const* message);
  void record_address(void const* p);
  /// The layout history of the replay (called once, by finish()).
  [[nodiscard]] replay_layout take_layout();
  void release_all() noexcept;
  [[nodiscard]] std::size_t held_now() const
  {
    return footprint_ != nullptr ? footprint_->held_bytes() : meter_->held_bytes();
  }
  /// The stack's memory now, laid out over the metered chunks (replay_state.cpp).
  [[nodiscard]] memory_state state() const;
  /// The state without a layout (stacks with a footprint_source), with `held` bytes held.
  [[nodiscard]] memory_state unlaid_state(std::size_t held) const;
  /// Appends the address range of every live block (replay_state.cpp).
  void live_ranges(std::vector<address_range>& out) const;

  mr::device_memory_resource* top_;
  metered_runtime* meter_;
  spec::footprint_source const* footprint_;
  replay_options const& options_;
  std::vector<live_block> slots_;
  std::vector<std::uint8_t> occupied_;
  std::vector<cudaStream_t> streams_;  ///< by stream index
  std::size_t live_{};
  std::size_t live_blocks_{};
  std::size_t peak_live_{};
  std::uint64_t event_{};
  timeline_sampler<2> timeline_;  ///< live, held
  std::size_t held_{};            ///< held bytes at the last sample
  peak_recorder recorder_;
  chunk_history history_{event_, recorder_};
  std::vector<std::uintptr_t> addresses_;  ///< by allocation ordinal
  bool addresses_omitted_{};
  /// Stacks with a footprint_source are timed call by call, so that asking them for their
  /// footprint (a CUDA call for pools) is not charged to them; so are threaded replays (the
  /// hand-over between threads is not the resource's time); others by the chunk.
  bool time_calls_{footprint_ != nullptr || options_.threads};
  double call_seconds_{};
  replay_result result_;
  std::optional<driver_call_counts> calls_at_start_;  ///< when the meter counts driver calls
};

}  // namespace gpumem::trace
