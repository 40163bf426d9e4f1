// The replay engine behind trace::replay() (src/trace only).
//
// Invariants: live_ == sum of sizes of occupied slots; live_blocks_ == number of occupied slots;
// every occupied slot holds a block allocated from top_ and not yet deallocated;
// result_.timeline holds one point per bucket_events_ events applied.
// Thread safety: apply() is called by one thread at a time (run_threads() passes a turn between
// threads with acquire/release, so each call happens-after the previous one).
#pragma once

#include <gpumem/trace/pointer_map.hpp>
#include <gpumem/trace/replay.hpp>

#include <utility>
#include <vector>

namespace gpumem::trace {

class replayer {
 public:
  replayer(trace_profile const& profile, mr::device_memory_resource& top, std::string const& name,
           spec::footprint_source const* footprint, metered_runtime& meter,
           replay_options const& options);
  replay_result run();

 private:
  struct stop_replay {};
  struct threaded_state;

  void run_serial();
  void run_threads();
  void thread_main(threaded_state& st, std::uint16_t me);
  bool run_thread_chunk(threaded_state& st, std::uint16_t me);
  void apply(compact_event const& e);
  void allocate(compact_event const& e, cudaStream_t s);
  void free(compact_event const& e, cudaStream_t s);
  void sample(bool grew);
  void* timed_allocate(std::size_t bytes, cudaStream_t s);
  void fail(compact_event const& e, char const* message);
  void release_all() noexcept;
  [[nodiscard]] std::size_t held_now() const
  {
    return footprint_ != nullptr ? footprint_->held_bytes() : meter_->held_bytes();
  }
  /// The stack's memory now, laid out over the metered chunks (replay_state.cpp).
  [[nodiscard]] memory_state state() const;

  trace_profile const& profile_;
  mr::device_memory_resource* top_;
  metered_runtime* meter_;
  spec::footprint_source const* footprint_;
  replay_options const& options_;
  std::vector<live_block> slots_;
  std::vector<std::uint8_t> occupied_;
  std::vector<cudaStream_t> streams_;  ///< by stream index
  std::size_t live_{};
  std::size_t live_blocks_{};
  std::uint64_t event_{};
  std::uint64_t bucket_events_{1};
  std::uint64_t countdown_{1};  ///< events left in the current timeline bucket
  std::size_t bucket_live_{};
  std::size_t bucket_held_{};
  std::size_t held_{};  ///< held bytes at the last sample
  /// Stacks with a footprint_source are timed call by call, so that asking them for their
  /// footprint (a CUDA call for pools) is not charged to them; so are threaded replays (the
  /// hand-over between threads is not the resource's time); others by the chunk.
  bool time_calls_{footprint_ != nullptr || options_.threads};
  double call_seconds_{};
  replay_result result_;
};

}  // namespace gpumem::trace
