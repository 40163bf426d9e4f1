// tools/gpumem/replay_command.hpp — `gpumem` (default run) and `gpumem replay`: replay traces over
// resource stacks on the GPU or the simulated device, print a table / JSON / CSV, write the report.
#pragma once

#include <gpumem/replay/replay.hpp>

#include <cstddef>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpumem::tool {

enum class output_format { table, json, csv };

struct replay_command_options {
  std::vector<std::string> traces;     ///< empty: the bundled traces
  std::vector<std::string> resources;  ///< specs; empty: every entry's default_run stack
  bool simulate{};                     ///< forced; also chosen when there is no GPU
  std::size_t capacity_bytes{std::size_t{80} << 30};
  bool threads{};
  output_format format{output_format::table};
  std::string report_dir;  ///< empty: no report folder
  bool progress{true};
  std::size_t repeats{5};  ///< replays of each stack timed (the figures come from the first)
  /// Count and time the driver calls of each stack's first (cold) replay.
  bool driver_calls{};
};

/// One resource over one trace: the result, or why it could not run.
struct resource_run {
  std::string spec;
  std::string error;  ///< set when the stack could not be built
  trace::replay_result result;
  std::vector<std::pair<std::string, double>> counters;  ///< a counting layer's, after the replay
  std::vector<double> seconds;  ///< host time of each timed replay (result.seconds is the first)
  /// [size, bytes the stack gives a request of that size] for the trace's sizes where that is
  /// not the size rounded up to 256 B (the page lays blocks out with it, as the replay does).
  std::vector<std::pair<std::size_t, std::size_t>> granted;
  /// --driver-calls: the calls of one more replay over the same stack, warm (nothing released in
  /// between); empty without the option, after a failure, or for a stack that logs (see
  /// run_one).
  std::optional<trace::driver_call_counts> warm_driver_calls;
};

struct trace_run {
  trace::trace_profile profile;
  std::vector<resource_run> runs;
  /// The replay of a resized pool stack (verdict.hpp's pool_candidates): the first candidate that
  /// did not grow, else the one that held least; empty when no pool stack needed resizing.
  std::optional<resource_run> suggested;
};

struct replay_report {
  bool simulated{};
  std::size_t capacity_bytes{};
  std::string device;             ///< "simulated 80GiB" or the GPU's name
  std::vector<trace_run> traces;  ///< the traces replayed to the end
  /// Why the run stopped before the trace `interrupted_at` (null: it did not stop early).
  std::exception_ptr interrupted;
  std::string interrupted_at;
};

/// The bundled traces (tools/gpumem/traces/*.csv), sorted; empty when none can be found.
[[nodiscard]] std::vector<std::string> bundled_traces();

/// Runs the replays; throws trace_error / spec_error for bad input found before any trace finished,
/// else keeps the error in `interrupted` beside the finished traces.
[[nodiscard]] replay_report run_replays(replay_command_options const& options);

/// Prints in the chosen format, writes the report folder; returns the exit status
/// (0, or 3 when a replay ran out of memory or a stack could not be built). Rethrows
/// `report.interrupted` after printing the traces that finished.
int print_and_report(replay_report const& report, replay_command_options const& options);

}  // namespace gpumem::tool
