// JSON rendering of a replay report (stdout with --json, results.json in the report folder).
#include "report.hpp"

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

void write_profile(std::ostream& out, trace::trace_profile const& p)
{
  out << "\"path\":" << json_string(p.path) << ",\"events\":" << p.events
      << ",\"allocations\":" << p.allocations << ",\"frees\":" << p.frees
      << ",\"allocate_failures\":" << p.allocate_failures
      << ",\"unknown_frees\":" << p.unknown_frees << ",\"double_allocates\":" << p.double_allocates
      << ",\"size_mismatches\":" << p.size_mismatches << ",\"left_live\":" << p.left_live
      << ",\"truncated_line\":" << p.truncated_line << ",\"peak_live_bytes\":" << p.peak_live_bytes
      << ",\"peak_live_event\":" << p.peak_live_event << ",\"threads\":" << p.threads.size()
      << ",\"streams\":" << p.streams.size() << ",\"parse_seconds\":" << num(p.parse_seconds);
}

void write_run(std::ostream& out, resource_run const& r, trace::trace_profile const& p,
               bool timelines)
{
  auto const& res = r.result;
  out << "{\"resource\":" << json_string(r.spec);
  if (!r.error.empty()) {
    out << ",\"error\":" << json_string(r.error) << "}";
    return;
  }
  out << ",\"peak_held_bytes\":" << res.peak_held_bytes
      << ",\"footprint_ratio\":" << num(res.footprint_ratio(p)) << ",\"at_peak\":";
  write_state(out, res.at_peak);
  out << ",\"operations\":" << res.operations << ",\"seconds\":" << num(res.seconds)
      << ",\"ns_per_op\":" << num(res.ns_per_operation()) << ",\"failure\":";
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
  if (timelines) {
    out << ",\"timeline\":[";
    char const* sep = "";
    for (auto const& pt : res.timeline) {
      out << sep << "[" << pt.event << "," << pt.live_bytes << "," << pt.held_bytes << "]";
      sep = ",";
    }
    out << "]";
  }
  out << "}";
}

}  // namespace

void write_json(std::ostream& out, replay_report const& report, bool timelines)
{
  out << "{\"device\":" << json_string(report.device)
      << ",\"simulated\":" << (report.simulated ? "true" : "false")
      << ",\"capacity_bytes\":" << report.capacity_bytes << ",\"traces\":[";
  char const* tsep = "";
  for (auto const& t : report.traces) {
    out << tsep << "{";
    write_profile(out, t.profile);
    out << ",\"results\":[";
    char const* rsep = "";
    for (auto const& r : t.runs) {
      out << rsep;
      write_run(out, r, t.profile, timelines);
      rsep = ",";
    }
    out << "]}";
    tsep = ",";
  }
  out << "]}\n";
}

}  // namespace gpumem::tool
