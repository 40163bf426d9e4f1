// JSON rendering of a replay report (stdout with --json, results.json in the report folder).
#include "figures.hpp"
#include "report.hpp"
#include "verdict.hpp"

#include <cstdio>

namespace gpumem::tool {
namespace {

std::string num(double v)
{
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

void write_state(std::ostream& out, trace::memory_state const& s)
{
  out << "{\"layout_known\":" << (s.layout_known ? "true" : "false")
      << ",\"held_bytes\":" << s.held_bytes << ",\"live_bytes\":" << s.live_bytes
      << ",\"live_blocks\":" << s.live_blocks << ",\"internal_bytes\":" << s.internal_bytes
      << ",\"free_bytes\":" << s.free_bytes << ",\"largest_free_bytes\":" << s.largest_free_bytes
      << ",\"internal_fragmentation\":" << num(s.internal_fragmentation())
      << ",\"external_fragmentation\":" << num(s.external_fragmentation()) << "}";
}

/// The trace's counts. "allocations" is the count only without `timelines` (as it always was in
/// --json); with them it is the allocation array (write_trace_data), and the count is
/// "allocation_count", written always.
void write_profile(std::ostream& out, trace::trace_profile const& p, bool timelines)
{
  out << "\"path\":" << json_string(p.path) << ",\"events\":" << p.events
      << ",\"allocation_count\":" << p.allocations;
  if (!timelines) { out << ",\"allocations\":" << p.allocations; }
  out << ",\"frees\":" << p.frees << ",\"allocate_failures\":" << p.allocate_failures
      << ",\"unknown_frees\":" << p.unknown_frees << ",\"double_allocates\":" << p.double_allocates
      << ",\"size_mismatches\":" << p.size_mismatches << ",\"left_live\":" << p.left_live
      << ",\"truncated_line\":" << p.truncated_line << ",\"peak_live_bytes\":" << p.peak_live_bytes
      << ",\"peak_live_event\":" << p.peak_live_event << ",\"threads\":" << p.threads.size()
      << ",\"streams\":" << p.streams.size() << ",\"parse_seconds\":" << num(p.parse_seconds)
      << ",\"allocations_omitted\":" << (p.allocations_omitted ? "true" : "false");
}

/// [[a, b], ...]
template <class Points>
void write_pairs(std::ostream& out, Points const& points)
{
  out << "[";
  char const* sep = "";
  for (auto const& [a, b] : points) {
    out << sep << "[" << a << "," << b << "]";
    sep = ",";
  }
  out << "]";
}

/// The trace's own data for the page: time, live over time, allocations and their stacks.
void write_trace_data(std::ostream& out, trace::trace_profile const& p)
{
  out << ",\"time_us\":";
  write_pairs(out, p.time_us);
  out << ",\"live_timeline\":";
  write_pairs(out, p.live_timeline);
  out << ",\"frames\":[";
  char const* sep = "";
  for (auto const& f : p.frames) {
    out << sep << json_string(f);
    sep = ",";
  }
  out << "],\"stacks\":[";
  sep = "";
  for (auto const& stack : p.stacks) {
    out << sep << "[";
    char const* fsep = "";
    for (auto f : stack) {
      out << fsep << f;
      fsep = ",";
    }
    out << "]";
    sep = ",";
  }
  out << "],\"allocations\":[";
  sep = "";
  for (auto const& a : p.allocation_log) {
    out << sep << "[" << a.alloc_event << "," << a.free_event << "," << a.size << "," << a.stack
        << "]";
    sep = ",";
  }
  out << "]";
}

std::string hex(std::uintptr_t v)
{
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

/// Where the blocks went ("addresses", parallel to the trace's allocations) and what was held.
void write_layout_data(std::ostream& out, trace::replay_layout const& l, std::size_t allocations)
{
  auto const offset = [&](std::uintptr_t a) {
    return a == 0 ? std::int64_t{-1} : static_cast<std::int64_t>(a - l.base);
  };
  out << ",\"addresses\":[";
  bool const any = l.known && !l.omitted;
  for (std::size_t k = 0; any && k < allocations; ++k) {
    out << (k == 0 ? "" : ",") << (k < l.addresses.size() ? offset(l.addresses[k]) : -1);
  }
  out << "],\"chunks\":[";
  char const* sep = "";
  for (auto const& c : l.chunks) {
    out << sep << "[" << offset(c.address) << "," << c.bytes << "," << c.from_event << ","
        << c.to_event << "]";
    sep = ",";
  }
  out << "],\"chunks_join\":" << (l.chunks_join ? "true" : "false");
}

void write_reservation(std::ostream& out, std::optional<reservation> const& r)
{
  out << ",\"reservation\":";
  if (!r) {
    out << "null";
    return;
  }
  out << "{\"bytes\":" << r->bytes << ",\"note\":" << json_string(r->note) << "}";
}

void write_verdict(std::ostream& out, verdict const& v, trace_run const& t)
{
  auto const spec_or_null = [](std::string const& s) {
    return s.empty() ? std::string{"null"} : json_string(s);
  };
  out << ",\"verdict\":{\"leanest\":" << spec_or_null(v.leanest)
      << ",\"leanest_ratio\":" << (v.leanest.empty() ? "null" : num(v.leanest_ratio))
      << ",\"fastest\":" << spec_or_null(v.fastest)
      << ",\"fastest_ns_per_op\":" << (v.fastest.empty() ? "null" : num(v.fastest_ns_per_op))
      << ",\"speed_basis\":" << json_string(v.speed_basis) << ",\"suggestion\":";
  if (v.suggested) {
    auto const& s = t.suggested->result;
    out << "{\"spec\":" << json_string(v.suggested->spec)
        << ",\"why\":" << json_string(v.suggested->why)
        << ",\"peak_held_bytes\":" << s.peak_held_bytes
        << ",\"footprint_ratio\":" << num(s.footprint_ratio(t.profile)) << "}";
  } else {
    out << "null";
  }
  out << ",\"notes\":[";
  char const* sep = "";
  for (auto const& n : v.notes) {
    out << sep << json_string(n);
    sep = ",";
  }
  out << "]}";
}

/// A double as it is (17 significant digits): the page shows the figures rounded as the table does.
std::string exact(double v)
{
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

/// {"median":..,"min":..,"max":..,"repeats":[..]}: ns/op over the repeats.
void write_timing(std::ostream& out, timing const& t)
{
  out << "{\"median\":" << exact(t.median) << ",\"min\":" << exact(t.min)
      << ",\"max\":" << exact(t.max) << ",\"repeats\":[";
  char const* sep = "";
  for (auto const v : t.ns_per_op) {
    out << sep << exact(v);
    sep = ",";
  }
  out << "]}";
}

/// The run's figures as the table and the page show them (figures.hpp): "figures".
void write_figures(std::ostream& out, run_figures const& f)
{
  out << ",\"figures\":{\"peak_held_bytes\":" << f.peak_held_bytes
      << ",\"footprint_ratio\":" << exact(f.footprint_ratio);
  if (f.at_peak_known) {
    out << ",\"internal_fragmentation\":" << exact(f.internal_fragmentation)
        << ",\"external_fragmentation\":" << exact(f.external_fragmentation)
        << ",\"free_bytes\":" << f.at_peak.free_bytes
        << ",\"largest_free_bytes\":" << f.at_peak.largest_free_bytes
        << ",\"internal_bytes\":" << f.at_peak.internal_bytes
        << ",\"layout_known\":" << (f.at_peak.layout_known ? "true" : "false");
  }
  out << ",\"ns_per_op\":";
  write_timing(out, f.speed);
  out << "}";
}

/// "granted": [[size, bytes given], ...] where that is not the size rounded up to 256 B.
void write_granted(std::ostream& out, resource_run const& r)
{
  out << ",\"granted\":";
  write_pairs(out, r.granted);
}

/// The blocks live at the peak of live bytes by call stack, most bytes first:
/// "live_at_peak_by_stack": [{"stack": index or -1, "bytes", "blocks"}, ...].
/// The first max_by_stack_rows stacks; the rest are summed in "live_at_peak_other_stacks".
void write_by_stack(std::ostream& out, trace::trace_profile const& p)
{
  constexpr std::size_t max_by_stack_rows = 100;
  auto const shares                       = live_at_peak_by_stack(p);
  out << ",\"live_at_peak_by_stack\":[";
  stack_share rest{};
  std::size_t others = 0;
  for (std::size_t i = 0; i < shares.size(); ++i) {
    auto const& s = shares[i];
    if (i >= max_by_stack_rows) {
      rest.bytes += s.bytes, rest.blocks += s.blocks, ++others;
      continue;
    }
    out << (i == 0 ? "" : ",") << "{\"stack\":" << s.stack << ",\"bytes\":" << s.bytes
        << ",\"blocks\":" << s.blocks << "}";
  }
  out << "],\"live_at_peak_other_stacks\":{\"stacks\":" << others << ",\"bytes\":" << rest.bytes
      << ",\"blocks\":" << rest.blocks << "}";
}

/// The verdict's runners-up and spreads: "verdict_spread".
void write_verdict_spread(std::ostream& out, verdict const& v)
{
  auto const runner_up = [&](contender const& c) {
    if (c.spec.empty()) {
      out << "null";
      return;
    }
    out << "{\"spec\":" << json_string(c.spec) << ",\"footprint_ratio\":" << num(c.ratio)
        << ",\"ns_per_op\":";
    write_timing(out, c.speed);
    out << "}";
  };
  out << ",\"verdict_spread\":{\"leanest_clear\":" << (v.leanest_clear ? "true" : "false")
      << ",\"leanest_runner_up\":";
  runner_up(v.leanest_runner_up);
  out << ",\"fastest_clear\":" << (v.fastest_clear ? "true" : "false") << ",\"fastest_ns_per_op\":";
  if (v.fastest.empty()) {
    out << "null";
  } else {
    write_timing(out, v.fastest_speed);
  }
  out << ",\"fastest_runner_up\":";
  runner_up(v.fastest_runner_up);
  out << ",\"repeats\":" << v.repeats << "}";
}

void write_run(std::ostream& out, resource_run const& r, trace::trace_profile const& p,
               bool simulated, bool timelines)
{
  auto const& res = r.result;
  out << "{\"resource\":" << json_string(r.spec);
  if (!r.error.empty()) {
    out << ",\"error\":" << json_string(r.error) << "}";
    return;
  }
  out << ",\"peak_held_bytes\":" << res.peak_held_bytes
      << ",\"peak_held_event\":" << res.peak_held_event
      << ",\"held_at_start\":" << res.held_at_start
      << ",\"footprint_ratio\":" << num(res.footprint_ratio(p))
      << ",\"layout_known\":" << (res.layout.known ? "true" : "false")
      << ",\"base\":" << json_string(hex(res.layout.base)) << ",\"at_peak\":";
  if (reached_peak(r, p)) {  // a replay that failed before the peak has no state there
    write_state(out, res.at_peak);
  } else {
    out << "null";
  }
  write_reservation(out, reservation_of(r, p));
  out << ",\"operations\":" << res.operations << ",\"seconds\":" << num(res.seconds)
      << ",\"ns_per_op\":" << num(figures_of(r, p).speed.median)
      << ",\"ns_per_op_basis\":" << json_string(speed_basis(simulated)) << ",\"failure\":";
  if (res.failure) {
    auto const& f = *res.failure;
    out << "{\"event\":" << f.event << ",\"line\":" << f.line << ",\"bytes\":" << f.bytes
        << ",\"message\":" << json_string(f.message) << ",\"state\":";
    write_state(out, f.state);
    out << "}";
  } else {
    out << "null";
  }
  if (!r.counters.empty()) {
    out << ",\"counters\":{";
    char const* csep = "";
    for (auto const& [name, value] : r.counters) {
      out << csep << json_string(name) << ":" << num(value);
      csep = ",";
    }
    out << "}";
  }
  write_figures(out, figures_of(r, p));
  if (timelines) {
    write_granted(out, r);
    out << ",\"timeline\":[";
    char const* sep = "";
    for (auto const& pt : res.timeline) {
      out << sep << "[" << pt.event << "," << pt.live_bytes << "," << pt.held_bytes << "]";
      sep = ",";
    }
    out << "]";
    write_layout_data(out, res.layout, p.allocation_log.size());
  }
  out << "}";
}

}  // namespace

void write_json(std::ostream& out, replay_report const& report, bool timelines)
{
  out << "{\"report_version\":2,\"device\":" << json_string(report.device)
      << ",\"simulated\":" << (report.simulated ? "true" : "false")
      << ",\"capacity_bytes\":" << report.capacity_bytes << ",\"traces\":[";
  char const* tsep = "";
  for (auto const& t : report.traces) {
    out << tsep << "{";
    write_profile(out, t.profile, timelines);
    auto const v = verdict_of(t, report.simulated);
    write_verdict(out, v, t);
    write_verdict_spread(out, v);
    if (timelines) {
      write_by_stack(out, t.profile);
      write_trace_data(out, t.profile);
    }
    out << ",\"results\":[";
    char const* rsep = "";
    for (auto const& r : t.runs) {
      out << rsep;
      write_run(out, r, t.profile, report.simulated, timelines);
      rsep = ",";
    }
    out << "]}";
    tsep = ",";
  }
  out << "]}\n";
}

}  // namespace gpumem::tool
