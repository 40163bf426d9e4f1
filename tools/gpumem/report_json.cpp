// JSON rendering of a replay report (stdout with --json, results.json in the report folder).
// The brackets are the writer's, the values nlohmann-json's (json_writer.hpp): the large arrays
// stream out element by element, and any text that is not UTF-8 comes out as U+FFFD.
#include "figures.hpp"
#include "json_writer.hpp"
#include "report.hpp"
#include "verdict.hpp"

#include <cstdio>

namespace gpumem::tool {
namespace {

using json = nlohmann::ordered_json;

/// `s` as JSON, or null when it is empty.
json text_or_null(std::string const& s)
{
  return s.empty() ? json(nullptr) : json(s);
}

void write_state(json_writer& w, trace::memory_state const& s)
{
  w.begin_object();
  w.member("layout_known", s.layout_known);
  w.member("held_bytes", s.held_bytes);
  w.member("live_bytes", s.live_bytes);
  w.member("live_blocks", s.live_blocks);
  w.member("internal_bytes", s.internal_bytes);
  w.member("free_bytes", s.free_bytes);
  w.member("largest_free_bytes", s.largest_free_bytes);
  w.member("internal_fragmentation", six_digits(s.internal_fragmentation()));
  w.member("external_fragmentation", six_digits(s.external_fragmentation()));
  w.end_object();
}

/// The trace's counts. "allocations" is the count only without `timelines` (as it always was in
/// --json); with them it is the allocation array (write_trace_data), and the count is
/// "allocation_count", written always.
void write_profile(json_writer& w, trace::trace_profile const& p, bool timelines)
{
  w.member("path", p.path);
  w.member("events", p.events);
  w.member("allocation_count", p.allocations);
  if (!timelines) { w.member("allocations", p.allocations); }
  w.member("frees", p.frees);
  w.member("allocate_failures", p.allocate_failures);
  w.member("unknown_frees", p.unknown_frees);
  w.member("double_allocates", p.double_allocates);
  w.member("size_mismatches", p.size_mismatches);
  w.member("left_live", p.left_live);
  w.member("truncated_line", p.truncated_line);
  w.member("peak_live_bytes", p.peak_live_bytes);
  w.member("peak_live_event", p.peak_live_event);
  w.member("threads", p.threads.size());
  w.member("streams", p.streams.size());
  w.member("parse_seconds", six_digits(p.parse_seconds));
  w.member("allocations_omitted", p.allocations_omitted);
}

/// [[a, b], ...], one pair at a time.
template <class Points>
void write_pairs(json_writer& w, Points const& points)
{
  w.begin_array();
  for (auto const& [a, b] : points) { w.integers(a, b); }
  w.end_array();
}

/// The trace's own data for the page: time, live over time, allocations and their stacks.
void write_trace_data(json_writer& w, trace::trace_profile const& p)
{
  w.key("time_us");
  write_pairs(w, p.time_us);
  w.key("live_timeline");
  write_pairs(w, p.live_timeline);
  w.key("frames");
  w.begin_array();
  for (auto const& f : p.frames) { w.value(f); }
  w.end_array();
  w.key("stacks");
  w.begin_array();
  for (auto const& stack : p.stacks) {
    w.begin_array();
    for (auto frame : stack) { w.integer(frame); }
    w.end_array();
  }
  w.end_array();
  w.key("allocations");
  w.begin_array();
  for (auto const& a : p.allocation_log) {
    w.integers(a.alloc_event, a.free_event, a.size, a.stack);
  }
  w.end_array();
}

std::string hex(std::uintptr_t v)
{
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

/// Where the blocks went ("addresses", parallel to the trace's allocations) and what was held.
void write_layout_data(json_writer& w, trace::replay_layout const& l, std::size_t allocations)
{
  auto const offset = [&](std::uintptr_t a) {
    return a == 0 ? std::int64_t{-1} : static_cast<std::int64_t>(a - l.base);
  };
  w.key("addresses");
  w.begin_array();
  bool const any = l.known && !l.omitted;
  for (std::size_t k = 0; any && k < allocations; ++k) {
    w.integer(k < l.addresses.size() ? offset(l.addresses[k]) : std::int64_t{-1});
  }
  w.end_array();
  w.key("chunks");
  w.begin_array();
  for (auto const& c : l.chunks) {
    w.integers(offset(c.address), c.bytes, c.from_event, c.to_event);
  }
  w.end_array();
  w.member("chunks_join", l.chunks_join);
}

void write_reservation(json_writer& w, std::optional<reservation> const& r)
{
  if (!r) {
    w.member("reservation", nullptr);
    return;
  }
  w.key("reservation");
  w.begin_object();
  w.member("bytes", r->bytes);
  w.member("note", r->note);
  w.end_object();
}

void write_verdict(json_writer& w, verdict const& v, trace_run const& t)
{
  w.key("verdict");
  w.begin_object();
  w.member("leanest", text_or_null(v.leanest));
  w.member("leanest_ratio", v.leanest.empty() ? json(nullptr) : six_digits(v.leanest_ratio));
  w.member("fastest", text_or_null(v.fastest));
  w.member("fastest_ns_per_op",
           v.fastest.empty() ? json(nullptr) : six_digits(v.fastest_ns_per_op));
  w.member("speed_basis", v.speed_basis);
  w.key("suggestion");
  if (v.suggested) {
    auto const& s = t.suggested->result;
    w.begin_object();
    w.member("spec", v.suggested->spec);
    w.member("why", v.suggested->why);
    w.member("peak_held_bytes", s.peak_held_bytes);
    w.member("footprint_ratio", six_digits(s.footprint_ratio(t.profile)));
    w.end_object();
  } else {
    w.value(nullptr);
  }
  w.member("notes", v.notes);
  w.end_object();
}

/// Calls into CUDA by kind: {"create": {"calls": n, "seconds": s}, ...}, every kind.
void write_driver_calls(json_writer& w, trace::driver_call_counts const& c)
{
  w.begin_object();
  for (std::size_t i = 0; i < trace::driver_call_kinds; ++i) {
    auto const& k = c.of[i];
    w.key(std::string{to_string(static_cast<trace::driver_call>(i))});
    w.begin_object();
    w.member("calls", k.calls);
    w.member("seconds", six_digits(static_cast<double>(k.nanoseconds) * 1e-9));
    w.end_object();
  }
  w.end_object();
}

void write_failure(json_writer& w, std::optional<trace::replay_failure> const& failure)
{
  w.key("failure");
  if (!failure) {
    w.value(nullptr);
    return;
  }
  auto const& f = *failure;
  w.begin_object();
  w.member("event", f.event);
  w.member("line", f.line);
  w.member("bytes", f.bytes);
  w.member("message", f.message);
  w.key("state");
  write_state(w, f.state);
  w.end_object();
}

/// {"median":..,"min":..,"max":..,"repeats":[..]}: ns/op over the repeats, each as it is.
void write_timing(json_writer& w, timing const& t)
{
  w.begin_object();
  w.member("median", exact(t.median));
  w.member("min", exact(t.min));
  w.member("max", exact(t.max));
  w.key("repeats");
  w.begin_array();
  for (auto const v : t.ns_per_op) { w.value(exact(v)); }
  w.end_array();
  w.end_object();
}

/// The run's figures as the table and the page show them (figures.hpp): "figures". The page
/// rounds them as the table does, so they are written as they are (exact()).
void write_figures(json_writer& w, run_figures const& f)
{
  w.key("figures");
  w.begin_object();
  w.member("peak_held_bytes", f.peak_held_bytes);
  w.member("footprint_ratio", exact(f.footprint_ratio));
  if (f.at_peak_known) {
    w.member("internal_fragmentation", exact(f.internal_fragmentation));
    w.member("external_fragmentation", exact(f.external_fragmentation));
    w.member("free_bytes", f.at_peak.free_bytes);
    w.member("largest_free_bytes", f.at_peak.largest_free_bytes);
    w.member("internal_bytes", f.at_peak.internal_bytes);
    w.member("layout_known", f.at_peak.layout_known);
  }
  w.key("ns_per_op");
  write_timing(w, f.speed);
  w.end_object();
}

/// "granted": [[size, bytes given], ...] where that is not the size rounded up to 256 B.
void write_granted(json_writer& w, resource_run const& r)
{
  w.key("granted");
  write_pairs(w, r.granted);
}

/// The blocks live at the peak of live bytes by call stack, most bytes first:
/// "live_at_peak_by_stack": [{"stack": index or -1, "bytes", "blocks"}, ...].
/// The first max_by_stack_rows stacks; the rest are summed in "live_at_peak_other_stacks".
void write_by_stack(json_writer& w, trace::trace_profile const& p)
{
  constexpr std::size_t max_by_stack_rows = 100;
  auto const shares                       = live_at_peak_by_stack(p);
  w.key("live_at_peak_by_stack");
  w.begin_array();
  stack_share rest{};
  std::size_t others = 0;
  for (std::size_t i = 0; i < shares.size(); ++i) {
    auto const& s = shares[i];
    if (i >= max_by_stack_rows) {
      rest.bytes += s.bytes, rest.blocks += s.blocks, ++others;
      continue;
    }
    w.begin_object();
    w.member("stack", s.stack);
    w.member("bytes", s.bytes);
    w.member("blocks", s.blocks);
    w.end_object();
  }
  w.end_array();
  w.key("live_at_peak_other_stacks");
  w.begin_object();
  w.member("stacks", others);
  w.member("bytes", rest.bytes);
  w.member("blocks", rest.blocks);
  w.end_object();
}

/// A runner-up of the verdict: {"spec", "footprint_ratio", "ns_per_op": timing}, or null.
void write_runner_up(json_writer& w, contender const& c)
{
  if (c.spec.empty()) {
    w.value(nullptr);
    return;
  }
  w.begin_object();
  w.member("spec", c.spec);
  w.member("footprint_ratio", six_digits(c.ratio));
  w.key("ns_per_op");
  write_timing(w, c.speed);
  w.end_object();
}

/// The verdict's runners-up and spreads: "verdict_spread".
void write_verdict_spread(json_writer& w, verdict const& v)
{
  w.key("verdict_spread");
  w.begin_object();
  w.member("leanest_clear", v.leanest_clear);
  w.key("leanest_runner_up");
  write_runner_up(w, v.leanest_runner_up);
  w.member("fastest_clear", v.fastest_clear);
  w.key("fastest_ns_per_op");
  if (v.fastest.empty()) {
    w.value(nullptr);
  } else {
    write_timing(w, v.fastest_speed);
  }
  w.key("fastest_runner_up");
  write_runner_up(w, v.fastest_runner_up);
  w.member("repeats", v.repeats);
  w.end_object();
}

void write_run(json_writer& w, resource_run const& r, trace::trace_profile const& p, bool simulated,
               bool timelines)
{
  auto const& res = r.result;
  w.begin_object();
  w.member("resource", r.spec);
  if (!r.error.empty()) {
    w.member("error", r.error);
    w.end_object();
    return;
  }
  auto const figures = figures_of(r, p);
  w.member("peak_held_bytes", res.peak_held_bytes);
  w.member("peak_held_event", res.peak_held_event);
  w.member("held_at_start", res.held_at_start);
  w.member("footprint_ratio", six_digits(res.footprint_ratio(p)));
  w.member("layout_known", res.layout.known);
  w.member("base", hex(res.layout.base));
  w.key("at_peak");
  if (reached_peak(r, p)) {  // a replay that failed before the peak has no state there
    write_state(w, res.at_peak);
  } else {
    w.value(nullptr);
  }
  write_reservation(w, reservation_of(r, p));
  w.member("operations", res.operations);
  w.member("seconds", six_digits(res.seconds));
  w.member("ns_per_op", six_digits(figures.speed.median));
  w.member("ns_per_op_basis", speed_basis(simulated));
  write_failure(w, res.failure);
  if (!r.counters.empty()) {
    w.key("counters");
    w.begin_object();
    for (auto const& [name, value] : r.counters) { w.member(name, six_digits(value)); }
    w.end_object();
  }
  if (res.driver_calls) {
    w.key("driver_calls");  // the cold replay's calls into CUDA, by kind
    write_driver_calls(w, *res.driver_calls);
  }
  if (r.warm_driver_calls) {
    w.key("warm_driver_calls");  // those of one more replay over the same stack
    write_driver_calls(w, *r.warm_driver_calls);
  }
  write_figures(w, figures);
  if (timelines) {
    write_granted(w, r);
    w.key("timeline");
    w.begin_array();
    for (auto const& pt : res.timeline) { w.integers(pt.event, pt.live_bytes, pt.held_bytes); }
    w.end_array();
    write_layout_data(w, res.layout, p.allocation_log.size());
  }
  w.end_object();
}

}  // namespace

void write_json(std::ostream& out, replay_report const& report, bool timelines)
{
  json_writer w{out};
  w.begin_object();
  w.member("report_version", 2);
  w.member("device", report.device);
  w.member("simulated", report.simulated);
  w.member("capacity_bytes", report.capacity_bytes);
  w.key("traces");
  w.begin_array();
  for (auto const& t : report.traces) {
    w.begin_object();
    write_profile(w, t.profile, timelines);
    auto const v = verdict_of(t, report.simulated);
    write_verdict(w, v, t);
    write_verdict_spread(w, v);
    if (timelines) {
      write_by_stack(w, t.profile);
      write_trace_data(w, t.profile);
    }
    w.key("results");
    w.begin_array();
    for (auto const& r : t.runs) { write_run(w, r, t.profile, report.simulated, timelines); }
    w.end_array();
    w.end_object();
  }
  w.end_array();
  w.end_object();
  out << "\n";
}

}  // namespace gpumem::tool
