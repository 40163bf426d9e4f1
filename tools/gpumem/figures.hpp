// tools/gpumem/figures.hpp — every number the report shows about a replay, defined once. The
// table, the CSV and results.json (and so the page) take them from here; the page's layout row
// works out the same figures at other events with the same definition (docs/tool.md).
//
// Definitions: peak held and held/live as trace::replay_result; fragmentation and largest free at
// the trace's peak of live bytes as trace::memory_state; ns/op per repeat = the replay loop's
// host time / operations, summarized by the median and the spread (smallest to largest).
#pragma once

#include "replay_command.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpumem::tool {

/// Host time per operation over the repeats of one replay.
struct timing {
  std::vector<double> ns_per_op;  ///< one per repeat, in the order they ran
  double median{};
  double min{};
  double max{};
};

/// The figures of one stack over one trace (a stack that was built).
struct run_figures {
  std::size_t peak_held_bytes{};
  double footprint_ratio{};  ///< peak held / peak live
  /// The replay reached the trace's peak of live bytes: the at_peak figures mean something.
  bool at_peak_known{};
  trace::memory_state at_peak;
  double internal_fragmentation{};  ///< at_peak.internal_fragmentation()
  double external_fragmentation{};  ///< at_peak.external_fragmentation()
  timing speed;
};

/// Bytes and blocks live at the trace's peak of live bytes that one call stack allocated.
struct stack_share {
  std::int32_t stack{-1};  ///< index into trace_profile::stacks; -1: no stack recorded
  std::size_t bytes{};
  std::size_t blocks{};
};

/// `samples` (host seconds of each repeat) over `operations`; all zero when there are none.
[[nodiscard]] timing timing_of(std::vector<double> const& seconds, std::uint64_t operations);

/// True when the two spreads share a value: neither is clearly faster.
[[nodiscard]] bool overlaps(timing const& a, timing const& b) noexcept;

[[nodiscard]] run_figures figures_of(resource_run const& r, trace::trace_profile const& p);

/// The blocks live at p.peak_live_event grouped by call stack, most bytes first (ties: more
/// blocks, then the lower stack index). Empty when the trace kept no allocation log.
[[nodiscard]] std::vector<stack_share> live_at_peak_by_stack(trace::trace_profile const& p);

}  // namespace gpumem::tool
