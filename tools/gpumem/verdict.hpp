// tools/gpumem/verdict.hpp — what a replay report concludes, in words: per trace, the leanest and
// the fastest stack that finished, a suggested spec and notes; per result, the part of its
// footprint that is an up-front reservation or a growth policy rather than the trace's need.
//
// Only stacks that finished compete, and not the baseline (plain `cuda`: cudaMalloc per request,
// what the others are measured against). Leanest: the lowest held/live; clear unless the
// runner-up holds as much. Fastest: the lowest median ns/op over the repeats; clear unless its
// spread (smallest to largest) overlaps the runner-up's. Speeds on the simulated device measure
// the host's bookkeeping only (no GPU work is done), and say so.
#pragma once

#include "figures.hpp"
#include "replay_command.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace gpumem::tool {

/// Part of a stack's peak held that its policy explains, not the trace.
struct reservation {
  std::size_t bytes{};
  std::string note;
};

struct suggestion {
  std::string spec;
  std::string why;
};

/// One contender of the verdict: its spec, held/live and speed.
struct contender {
  std::string spec;  ///< empty: none
  double ratio{};
  timing speed;
};

struct verdict {
  std::string leanest;  ///< empty: no stack but the baseline finished
  double leanest_ratio{};
  contender leanest_runner_up;
  bool leanest_clear{};  ///< the runner-up holds more (or there is none)
  std::string fastest;
  double fastest_ns_per_op{};  ///< the median
  timing fastest_speed;
  contender fastest_runner_up;
  bool fastest_clear{};   ///< the spreads of the fastest and the runner-up do not overlap
  std::size_t repeats{};  ///< timed replays per stack (the fewest over the contenders)
  std::string speed_basis;
  std::optional<suggestion> suggested;
  std::vector<std::string> notes;
};

/// The baseline: every layer is an adaptor or the plain `cuda` leaf (false for a bad spec).
[[nodiscard]] bool is_baseline(std::string const& spec_text);

/// "host bookkeeping only (simulated device)" or "GPU".
[[nodiscard]] std::string speed_basis(bool simulated);

/// True when the replay got past the trace's peak of live bytes (its at_peak numbers mean
/// something).
[[nodiscard]] bool reached_peak(resource_run const& r, trace::trace_profile const& p);

[[nodiscard]] std::optional<reservation> reservation_of(resource_run const& r,
                                                        trace::trace_profile const& p);

/// The specs worth replaying to find a pool size for `r` that need not grow: the same stack with
/// pool:initial= the trace's peak live bytes rounded up to a MiB, then 1.25 and 1.5 times that.
/// Empty unless `r` replayed the whole trace over a pool that grew or starts at more than twice
/// what the trace needs.
[[nodiscard]] std::vector<std::string> pool_candidates(resource_run const& r,
                                                       trace::trace_profile const& p);

/// Uses t.suggested (the replay of the chosen candidate) for the suggestion: a spec is suggested
/// only when its replay finished and held less than the stack it resizes.
[[nodiscard]] verdict verdict_of(trace_run const& t, bool simulated);

}  // namespace gpumem::tool
