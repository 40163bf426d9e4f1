// tools/gpumem/report.hpp — the replay results for people (table), programs (JSON, CSV) and
// browsers (a self-contained HTML page: inline SVG drawn by inline JS, no network).
#pragma once

#include "replay_command.hpp"

#include <ostream>
#include <string>
#include <vector>

namespace gpumem::tool {

void write_table(std::ostream& out, replay_report const& report);
void write_csv(std::ostream& out, replay_report const& report);
/// The report as JSON (report_version 2, see docs/tool.md). `timelines`: include the bulky arrays
/// — memory over time, the trace's allocations, frames and stacks, each stack's addresses and
/// chunks — as the report folder's results.json and the page do; `--json` leaves them out.
void write_json(std::ostream& out, replay_report const& report, bool timelines);
void write_html(std::ostream& out, replay_report const& report);

/// Writes index.html, results.json and results.csv into `dir` (created); returns index.html's
/// absolute path. Throws output_error when a file cannot be written or is one of `inputs`.
std::string write_report_folder(std::string const& dir, replay_report const& report,
                                std::vector<std::string> const& inputs);

/// "1.50 GiB", "256 B" — compact sizes for tables.
[[nodiscard]] std::string human_bytes(std::size_t bytes);
/// One CSV field as RFC 4180 writes it: quoted (inner quotes doubled) when it holds a comma, a
/// quote or a line break, else as it is.
[[nodiscard]] std::string csv_field(std::string const& s);
/// "create 12 (0.103 ms), map 12 (0.020 ms)" — the driver calls counted, kinds without calls left
/// out ("none" when there were none).
[[nodiscard]] std::string describe_driver_calls(trace::driver_call_counts const& c);
/// "cache_hits 12, cache_misses 3" — a counting layer's counters on one line.
[[nodiscard]] std::string describe_counters(std::vector<std::pair<std::string, double>> const& c);

}  // namespace gpumem::tool
