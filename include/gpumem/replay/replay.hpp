// gpumem/replay/replay.hpp — replays an allocation trace over a resource stack and measures it.
//
// A trace is parsed once, streaming (bounded memory at any length), on a thread of its own: the
// pass learns what does not depend on the resource (event count, peak live bytes and where it
// happens, threads, streams, anomalies) and keeps the events in a compact binary file
// (compact_trace.hpp). profile_and_replay() replays over a first stack while that pass is still
// reading (the replay needs nothing known in advance); replay() drives further stacks from the
// compact file; profile_trace() is the pass alone. A replay measures footprint, fragmentation at
// the peak, host time and memory over time.
//
// Anomalies in a trace are counted, never fatal: a free of a pointer that is not live is skipped
// (unknown_frees); an allocate of a pointer already live first frees the stale block
// (double_allocates); a free whose size differs from its allocate frees with the allocated size
// (size_mismatches); "allocate failure" rows are skipped; blocks live at the end are freed.
// An out-of-memory from the stack stops that replay at the event, with the stack's state.
//
// Definitions (docs/tool.md): footprint = bytes the stack holds from below (metered_runtime, or
// the stack's footprint_source); live = bytes the trace has allocated and not freed. At the first
// event where live is at its peak: internal = per live block, the slack up to the size the stack
// really gives it (its 256-byte rounding, or the bin or block it lands in: options.granted_bytes),
// bounded by the next block and its chunk's end; free = held - live - internal; largest free =
// longest held range not covered by a live block and its slack; external fragmentation = 1 -
// largest free / free. Thread safety: replay() is called from one thread (it may start its own, see
// `threads`).
#pragma once

#include <gpumem/spec/resource_factory.hpp>
#include <gpumem/trace/compact_trace.hpp>
#include <gpumem/runtime/driver_calls.hpp>
#include <gpumem/runtime/metered_runtime.hpp>
#include <gpumem/trace/trace_event.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gpumem::trace {

/// One successful allocate of a trace: when it was made and freed, its size and call stack.
struct allocation_record {
  std::uint64_t alloc_event{};  ///< 0-based event index
  std::int64_t free_event{-1};  ///< -1: never freed in the trace
  std::uint64_t size{};
  std::int32_t stack{-1};  ///< index into trace_profile::stacks; -1: no stack recorded
};

/// Traces with more allocations keep no allocation_log (nor replay addresses): memory stays
/// bounded.
inline constexpr std::size_t max_recorded_allocations = 2'000'000;

/// What a trace is, independent of any resource.
struct trace_profile {
  std::string path;
  std::uint64_t events{};       ///< allocate + free + allocate-failure rows
  std::uint64_t allocations{};  ///< successful allocate rows
  std::uint64_t frees{};
  std::uint64_t allocate_failures{};  ///< "allocate failure" rows (skipped)
  std::uint64_t unknown_frees{};      ///< free of a pointer not live (skipped)
  std::uint64_t double_allocates{};   ///< allocate of a live pointer (stale block freed first)
  std::uint64_t size_mismatches{};    ///< free size != allocate size (allocate size used)
  std::uint64_t left_live{};          ///< blocks never freed (freed at the end)
  /// The last line, cut off (no newline, not a whole event: a crashed writer), skipped; 0: none.
  std::size_t truncated_line{};
  std::size_t peak_live_bytes{};
  std::uint64_t peak_live_event{};     ///< 0-based index of the first event reaching the peak
  std::size_t peak_live_blocks{};      ///< live blocks at that event
  std::vector<std::uint64_t> threads;  ///< distinct Thread ids, in order of appearance
  std::vector<std::uint64_t> streams;  ///< distinct Stream ids, in order of appearance
  double parse_seconds{};  ///< time the pass spent reading and profiling (waits excluded)
  std::uint32_t slots{};   ///< most blocks live at once (slot numbers < slots)
  /// Every successful allocate, in event order (empty when allocations_omitted).
  std::vector<allocation_record> allocation_log;
  bool allocations_omitted{};  ///< more than max_recorded_allocations
  /// [event, live bytes]: live from the trace alone, sampled as replay timelines are (600 points).
  std::vector<std::array<std::uint64_t, 2>> live_timeline;
  /// [event, Time - the first event's Time] at the same events; empty when Time never changes.
  std::vector<std::array<std::uint64_t, 2>> time_us;
  std::vector<std::string> frames;  ///< distinct frame texts (Frames column)
  std::vector<std::vector<std::uint32_t>>
      stacks;                              ///< distinct stacks: frame indices, innermost first
  std::shared_ptr<compact_trace> compact;  ///< the events, resolved, for replay()
};

struct replay_progress {
  std::function<void(std::size_t done_bytes, std::size_t total_bytes)> report;
};

/// Streams `path` once; throws trace_error on a malformed trace.
[[nodiscard]] trace_profile profile_trace(std::string const& path,
                                          replay_progress const& progress = {});

struct timeline_point {
  std::uint64_t event{};  ///< last event of the sample
  std::size_t live_bytes{};
  std::size_t held_bytes{};
};

/// The stack's memory at one moment.
struct memory_state {
  bool layout_known{};  ///< false when the stack bypasses the runtime (peers): only held and live
  std::size_t held_bytes{};
  std::size_t live_bytes{};
  std::size_t live_blocks{};
  std::size_t internal_bytes{};
  std::size_t free_bytes{};
  std::size_t largest_free_bytes{};
  /// internal / (live + internal): the share of the memory given to live blocks that they do not
  /// use (not / held: an up-front reservation would hide it).
  [[nodiscard]] double internal_fragmentation() const;
  [[nodiscard]] double external_fragmentation() const;  ///< 1 - largest free / free
};

struct replay_failure {
  std::uint64_t event{};  ///< 0-based event index
  std::uint64_t line{};   ///< line in the trace file
  std::size_t bytes{};    ///< the request that failed
  std::string message;    ///< the resource's diagnosis
  memory_state state;     ///< the stack's memory when it failed
};

/// An address range a stack held from below during the replay.
struct held_chunk {
  std::uintptr_t address{};
  std::size_t bytes{};
  std::uint64_t from_event{};  ///< taken during this event (0: held before the first event)
  std::int64_t to_event{-1};   ///< given back during this event; -1: still held at the end
};

/// Where a replay put each block and which ranges it held (stacks whose upstream memory goes
/// through the meter; known is false for the others, and everything else is empty).
struct replay_layout {
  bool known{};
  bool omitted{};         ///< too many allocations or chunks to keep: addresses/chunks empty
  std::uintptr_t base{};  ///< lowest address held or handed out (0: none)
  std::vector<std::uintptr_t>
      addresses;  ///< by allocation ordinal (trace_profile::allocation_log);
                  ///< 0 or missing: not made (the replay stopped)
  std::vector<held_chunk> chunks;
  bool chunks_join{};  ///< chunks are virtual-memory mappings: touching ones form one range
};

struct replay_result {
  std::string trace;
  std::string resource;
  std::size_t peak_held_bytes{};
  std::uint64_t peak_held_event{};  ///< first event after which held reached its peak
  std::size_t held_at_start{};      ///< held before the first event (an up-front reservation)
  replay_layout layout;
  memory_state at_peak;        ///< at profile.peak_live_event
  std::uint64_t operations{};  ///< allocate + deallocate calls made
  double seconds{};            ///< host time of the replay loop (excluding parsing)
  std::vector<timeline_point> timeline;
  std::optional<replay_failure> failure;
  /// The driver calls the stack made during the replay (from its first event to its last), when
  /// the meter counts them (metered_runtime::count_driver_calls).
  std::optional<driver_call_counts> driver_calls;
  [[nodiscard]] double ns_per_operation() const;
  [[nodiscard]] double footprint_ratio(trace_profile const& p) const;  ///< peak held / peak live
};

struct replay_options {
  /// Samples of memory over time, each the max over a span of events: at least this many (when
  /// the trace has that many events) and fewer than twice as many (spans double as the trace goes).
  std::size_t timeline_points{600};
  std::size_t chunk_events{std::size_t{1} << 14};
  /// Replay each trace thread on its own host thread, in the trace's global order.
  bool threads{false};
  /// The bytes a request really takes in the stack (a bin's or block's size), for internal
  /// fragmentation; empty: rounded up to 256 B. replay() over a resource_stack fills it from
  /// resource_stack::granted_bytes when empty.
  std::function<std::size_t(std::size_t)> granted_bytes;
  /// Maps a trace stream id to the stream to replay it on (default: the default stream).
  std::function<cudaStream_t(std::uint64_t trace_stream)> stream_of;
  replay_progress progress;
};

/// Replays `profile.path` over `stack`, whose runtime is `meter` (the footprint source unless the
/// stack has a footprint_source layer). Throws trace_error on a malformed trace.
[[nodiscard]] replay_result replay(trace_profile const& profile, spec::resource_stack& stack,
                                   metered_runtime& meter, replay_options const& options = {});

/// The same over any resource (named `name` in the result) whose upstream memory goes through
/// `meter`, or whose footprint `footprint` reports (may be null).
[[nodiscard]] replay_result replay(trace_profile const& profile, mr::device_memory_resource& top,
                                   std::string const& name, spec::footprint_source const* footprint,
                                   metered_runtime& meter, replay_options const& options = {});

/// A profile and the replay made while profiling.
struct profiled_replay {
  trace_profile profile;
  replay_result result;
};

/// Reads `path` once: profiles it on a thread of its own while the caller's thread replays it over
/// `stack` (with `options.threads`, the trace is profiled first: the threads must be known). The
/// profile can then drive replay() of other stacks. Throws trace_error on a malformed trace.
[[nodiscard]] profiled_replay profile_and_replay(std::string const& path,
                                                 spec::resource_stack& stack,
                                                 metered_runtime& meter,
                                                 replay_options const& options = {});
[[nodiscard]] profiled_replay profile_and_replay(std::string const& path,
                                                 mr::device_memory_resource& top,
                                                 std::string const& name,
                                                 spec::footprint_source const* footprint,
                                                 metered_runtime& meter,
                                                 replay_options const& options = {});

}  // namespace gpumem::trace
