// Table, CSV and JSON renderings of a replay report.
#include "figures.hpp"
#include "report.hpp"
#include "verdict.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>

namespace gpumem::tool {
namespace {

std::string fixed(double v, int digits)
{
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string percent(double v)
{
  return fixed(v * 100.0, 1) + "%";
}

/// External fragmentation with the free bytes it is measured over: "95.0% of 30.00 MiB".
std::string external(run_figures const& f)
{
  return percent(f.external_fragmentation) + " of " + human_bytes(f.at_peak.free_bytes);
}

std::string pad(std::string const& s, std::size_t width, bool right = false)
{
  if (s.size() >= width) { return s + " "; }
  std::string fill(width - s.size(), ' ');
  return right ? fill + s + " " : s + fill + " ";
}

std::string name_of(std::string const& path)
{
  return std::filesystem::path{path}.filename().string();
}

void write_profile(std::ostream& out, trace::trace_profile const& p)
{
  out << "trace " << name_of(p.path) << ": " << p.events << " events (" << p.allocations
      << " allocations, " << p.frees << " frees), peak live " << human_bytes(p.peak_live_bytes)
      << " in " << p.peak_live_blocks << " blocks at event " << p.peak_live_event << ", "
      << p.threads.size() << " thread(s), " << p.streams.size() << " stream(s); read in "
      << fixed(p.parse_seconds, 3) << " s ("
      << fixed(static_cast<double>(p.events) / std::max(p.parse_seconds, 1e-9) / 1e6, 1)
      << " M events/s)\n";
  if (p.unknown_frees + p.double_allocates + p.size_mismatches + p.allocate_failures != 0) {
    out << "  trace anomalies (counted, not fatal): " << p.unknown_frees
        << " free(s) of unknown pointers skipped, " << p.double_allocates
        << " allocate(s) of a live pointer (stale block freed first), " << p.size_mismatches
        << " free(s) with a wrong size, " << p.allocate_failures
        << " 'allocate failure' row(s) skipped\n";
  }
  if (p.truncated_line != 0) {
    out << "  line " << p.truncated_line
        << " was cut off (no newline, not a whole event) and was skipped: the program that wrote "
           "the trace may have stopped while writing\n";
  }
  if (p.left_live != 0) {
    out << "  " << p.left_live << " block(s) never freed in the trace (freed after the replay)\n";
  }
}

/// "105.1 (101.0-110.2)": the median ns/op and its spread over the repeats.
std::string speed_text(timing const& t)
{
  if (t.ns_per_op.size() < 2) { return fixed(t.median, 1); }
  return fixed(t.median, 1) + " (" + fixed(t.min, 1) + "-" + fixed(t.max, 1) + ")";
}

void write_row(std::ostream& out, resource_run const& r, trace::trace_profile const& p)
{
  out << "  " << pad(r.spec, 26);
  if (!r.error.empty()) {
    out << "could not be built: " << r.error << "\n";
    return;
  }
  auto const f   = figures_of(r, p);
  auto const& at = f.at_peak;
  out << pad(human_bytes(f.peak_held_bytes), 12, true)
      << pad(fixed(f.footprint_ratio, 3), 10, true);
  if (!f.at_peak_known) {
    out << pad("-", 9, true) << pad("-", 20, true) << pad("-", 12, true)
        << pad(speed_text(f.speed), 24, true) << " OUT OF MEMORY at line " << r.result.failure->line
        << " (before the peak)\n";
    return;
  }
  out << pad(percent(f.internal_fragmentation), 9, true)
      << pad(at.layout_known ? external(f) : "n/a", 20, true)
      << pad(at.layout_known ? human_bytes(at.largest_free_bytes) : "n/a", 12, true)
      << pad(speed_text(f.speed), 24, true);
  if (r.result.failure) { out << " OUT OF MEMORY at line " << r.result.failure->line; }
  out << "\n";
  if (!r.counters.empty()) { out << "    " << describe_counters(r.counters) << "\n"; }
  if (r.result.driver_calls) {
    out << "    CUDA calls, cold: " << describe_driver_calls(*r.result.driver_calls) << "\n";
  }
  if (r.warm_driver_calls) {
    out << "    CUDA calls, warm: " << describe_driver_calls(*r.warm_driver_calls) << "\n";
  }
  if (auto const why = reservation_of(r, p)) { out << "    reservation: " << why->note << "\n"; }
}

/// "pool>cuda (median 105.1 ns/op, 101.0-110.2 over 5 repeats)"
std::string speed_words(std::string const& spec, timing const& t)
{
  return spec + " (median " + fixed(t.median, 1) + " ns/op, " + fixed(t.min, 1) + "-" +
         fixed(t.max, 1) + " over " + std::to_string(t.ns_per_op.size()) + " repeat(s))";
}

void write_verdict(std::ostream& out, verdict const& v)
{
  if (!v.leanest.empty()) {
    auto const& lr = v.leanest_runner_up;
    out << "  verdict: leanest ";
    if (v.leanest_clear) {
      out << v.leanest << " (held/live " << fixed(v.leanest_ratio, 3) << ")";
      if (!lr.spec.empty()) { out << ", next " << lr.spec << " (" << fixed(lr.ratio, 3) << ")"; }
    } else {
      out << "- no clear winner: " << v.leanest << " and " << lr.spec << " both hold "
          << fixed(v.leanest_ratio, 3) << " x the peak live bytes";
    }
    out << "\n  verdict: fastest ";
    if (v.fastest_clear) {
      out << speed_words(v.fastest, v.fastest_speed);
      if (!v.fastest_runner_up.spec.empty()) {
        out << ", next " << speed_words(v.fastest_runner_up.spec, v.fastest_runner_up.speed);
      }
    } else {
      out << "- no clear winner: " << speed_words(v.fastest, v.fastest_speed) << " and "
          << speed_words(v.fastest_runner_up.spec, v.fastest_runner_up.speed) << " overlap";
    }
    out << "; " << v.speed_basis << "\n";
  }
  if (v.suggested) {
    out << "  suggestion: " << v.suggested->spec << " (" << v.suggested->why << ")\n";
  }
  for (auto const& n : v.notes) { out << "  note: " << n << "\n"; }
}

/// The call stacks that hold most at the peak of live bytes (the first `most`).
void write_by_stack(std::ostream& out, trace::trace_profile const& p, std::size_t most = 5)
{
  auto const shares = live_at_peak_by_stack(p);
  if (shares.empty() || p.stacks.empty()) { return; }
  out << "  live at the peak by call stack (innermost frame; bytes, blocks):\n";
  for (std::size_t i = 0; i < std::min(most, shares.size()); ++i) {
    auto const& s = shares[i];
    auto const frame =
        s.stack >= 0 && !p.stacks[s.stack].empty() ? p.frames[p.stacks[s.stack][0]] : "(no stack)";
    out << "    " << pad(human_bytes(s.bytes), 12, true) << pad(std::to_string(s.blocks), 7, true)
        << " " << frame << "\n";
  }
  if (shares.size() > most) {
    out << "    ... " << shares.size() - most << " more stack(s) in the report\n";
  }
}

void write_failure(std::ostream& out, resource_run const& r)
{
  auto const& f = *r.result.failure;
  auto const& s = f.state;
  out << "\n  " << r.spec << ": out of memory at event " << f.event << " (line " << f.line
      << "), allocating " << human_bytes(f.bytes) << ":\n    " << f.message << "\n    state: holds "
      << human_bytes(s.held_bytes) << ", live " << human_bytes(s.live_bytes) << " in "
      << s.live_blocks << " blocks";
  if (s.layout_known) {
    out << ", free " << human_bytes(s.free_bytes) << ", largest free block "
        << human_bytes(s.largest_free_bytes);
  }
  out << "\n    what to do: give the simulated device more memory (--simulate=CAPACITY) or "
         "choose a leaner resource\n";
}

}  // namespace

std::string describe_driver_calls(trace::driver_call_counts const& c)
{
  std::string s;
  for (std::size_t i = 0; i < trace::driver_call_kinds; ++i) {
    auto const& k = c.of[i];
    if (k.calls == 0) { continue; }
    s += (s.empty() ? "" : ", ") + std::string{to_string(static_cast<trace::driver_call>(i))} +
         " " + std::to_string(k.calls) + " (" +
         fixed(static_cast<double>(k.nanoseconds) * 1e-6, 3) + " ms)";
  }
  return s.empty() ? "none" : s;
}

std::string describe_counters(std::vector<std::pair<std::string, double>> const& c)
{
  std::string out;
  for (auto const& [name, value] : c) {
    out += (out.empty() ? "" : ", ") + name + " " + fixed(value, 0);
  }
  return out;
}

std::string human_bytes(std::size_t bytes)
{
  static constexpr char const* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v                             = static_cast<double>(bytes);
  int u                                = 0;
  while (v >= 1024.0 && u < 4) { v /= 1024.0, ++u; }
  return u == 0 ? std::to_string(bytes) + " B" : fixed(v, 2) + " " + units[u];
}

std::string csv_field(std::string const& s)
{
  if (s.find_first_of(",\"\r\n") == std::string::npos) { return s; }
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') { out += '"'; }
    out += c;
  }
  return out + "\"";
}

void write_table(std::ostream& out, replay_report const& report)
{
  out << "gpumem replay on " << report.device << "\n";
  for (auto const& t : report.traces) {
    out << "\n";
    write_profile(out, t.profile);
    out << "  " << pad("resource", 26) << pad("peak held", 12, true) << pad("held/live", 10, true)
        << pad("internal", 9, true) << pad("external of free", 20, true)
        << pad("largest free", 12, true) << pad("ns/op (spread)", 24, true)
        << (report.simulated ? " (host bookkeeping only)" : "") << "\n";
    for (auto const& r : t.runs) { write_row(out, r, t.profile); }
    write_by_stack(out, t.profile);
    write_verdict(out, verdict_of(t, report.simulated));
    for (auto const& r : t.runs) {
      if (r.error.empty() && r.result.failure) { write_failure(out, r); }
    }
  }
  out << "\npeak held: most memory the stack held from below; held/live: that / peak live bytes;\n"
         "internal, external fragmentation and largest free block: at the peak of live bytes\n"
         "(external: 1 - largest free / free, over the free bytes shown);\n"
         "ns/op: host time per allocate or free in the replay loop, the median over the repeats\n"
         "(--repeat) with the smallest and largest in parentheses (on the simulated device, the\n"
         "resources' host bookkeeping only: no GPU work is done). See docs/tool.md.\n";
}

/// "internal,external,largest free" at the peak; empty fields when the replay failed before it.
std::string at_peak_fields(run_figures const& f)
{
  if (!f.at_peak_known) { return ",,"; }
  return fixed(f.internal_fragmentation, 6) + "," + fixed(f.external_fragmentation, 6) + "," +
         std::to_string(f.at_peak.largest_free_bytes);
}

void write_csv(std::ostream& out, replay_report const& report)
{
  out << "trace,resource,status,peak_live_bytes,peak_held_bytes,footprint_ratio,"
         "internal_fragmentation,external_fragmentation,largest_free_at_peak_bytes,ns_per_op,"
         "operations,free_at_peak_bytes,ns_per_op_basis,ns_per_op_min,ns_per_op_max,repeats\n";
  for (auto const& t : report.traces) {
    for (auto const& r : t.runs) {
      auto const& res = r.result;
      auto const f    = figures_of(r, t.profile);
      std::string const status =
          !r.error.empty() ? "build_error" : (res.failure ? "out_of_memory" : "ok");
      out << csv_field(name_of(t.profile.path)) << "," << csv_field(r.spec) << "," << status << ","
          << t.profile.peak_live_bytes << "," << f.peak_held_bytes << ","
          << fixed(f.footprint_ratio, 6) << "," << at_peak_fields(f) << ","
          << fixed(f.speed.median, 2) << "," << res.operations << ","
          << (f.at_peak_known ? std::to_string(f.at_peak.free_bytes) : "") << ","
          << csv_field(speed_basis(report.simulated)) << "," << fixed(f.speed.min, 2) << ","
          << fixed(f.speed.max, 2) << "," << f.speed.ns_per_op.size() << "\n";
    }
  }
}

}  // namespace gpumem::tool
