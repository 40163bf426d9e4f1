// One pass over a CSV trace on a thread of its own (src/replay only): read, parse, profile, keep
// the compact events in the profile's compact_trace and, when asked, hand them over chunk by chunk
// so that a replay runs on the caller's thread while the trace is still being read.
//
// Memory: at most `depth` chunks wait in the queue (chunk buffers are recycled), whatever the trace
// length; the compact events live in their temporary file.
// Errors: the producer's exception (trace_error for a malformed line, runtime_error for the
// temporary file) is rethrown by next() once the chunks before it have been handed over.
// Invariants: ready_.size() <= depth; the profile is complete once done_ is set and is read only
// after next() returned false (the producer has stopped writing it).
// Thread safety: one consumer thread calls next() / profile(); the producer is internal.
#pragma once

#include <gpumem/trace/compact_trace.hpp>
#include <gpumem/replay/replay.hpp>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gpumem::trace {

struct profiled_chunk {
  std::vector<compact_event> events;       ///< empty unless events are forwarded
  std::vector<std::uint64_t> new_streams;  ///< stream ids first seen in this chunk, in index order
  std::size_t bytes_read{};                ///< of the trace file, after this chunk
  std::size_t file_bytes{};
};

class trace_pipeline {
 public:
  static constexpr std::size_t chunk_events = std::size_t{1} << 14;
  static constexpr std::size_t depth        = 4;

  /// Starts reading `path`; `forward_events`: hand the compact events to next() (else only
  /// progress).
  trace_pipeline(std::string const& path, bool forward_events);
  /// Stops the producer (early, if the consumer gave up) and joins it.
  ~trace_pipeline();
  trace_pipeline(trace_pipeline const&)            = delete;
  trace_pipeline& operator=(trace_pipeline const&) = delete;

  /// The next chunk into `out` (its old buffer is recycled); false at the end of the trace.
  bool next(profiled_chunk& out);
  /// The complete profile, once next() has returned false.
  [[nodiscard]] trace_profile take_profile() { return std::move(profile_); }

 private:
  void produce();
  void produce_chunks();
  /// Waits for room, then queues `c`; false when the consumer is gone.
  bool hand_over(profiled_chunk&& c);

  trace_profile profile_;
  std::string path_;
  bool forward_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<profiled_chunk> ready_;
  std::vector<std::vector<compact_event>> spare_;  ///< recycled chunk buffers
  double waited_seconds_{};  ///< producer time spent waiting for room (not reading)
  bool done_{};
  bool stop_{};
  std::exception_ptr error_;
  std::thread thread_;  ///< last: started once everything above exists
};

}  // namespace gpumem::trace
