// The report's conclusions in words (see verdict.hpp).
#include "verdict.hpp"

#include "report.hpp"

#include <gpumem/spec/resource_spec.hpp>

#include <algorithm>
#include <cstdio>

namespace gpumem::tool {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

bool has_layer(std::string const& spec_text, char const* name)
{
  try {
    auto const layers = spec::parse_resource_spec(spec_text).layers;
    return std::any_of(layers.begin(), layers.end(), [&](auto const& l) { return l.name == name; });
  } catch (std::exception const&) {
    return false;
  }
}

/// The trace's peak live bytes rounded up to a MiB, times `factor`, rounded up to a MiB.
std::size_t pool_initial_for(trace::trace_profile const& p, double factor = 1.0)
{
  auto const live = static_cast<double>(std::max<std::size_t>(p.peak_live_bytes, 1));
  auto const mib  = static_cast<std::size_t>(live * factor / static_cast<double>(MiB) + 0.999999);
  return std::max<std::size_t>(mib, 1) * MiB;
}

/// `spec_text` with its pool layer's initial size set to `bytes` (a whole number of MiB, written
/// so: exact, where GiB would be rounded to two decimals).
std::string with_pool_initial(std::string const& spec_text, std::size_t bytes)
{
  auto s = spec::parse_resource_spec(spec_text);
  for (auto& layer : s.layers) {
    if (layer.name != "pool") { continue; }
    std::erase_if(layer.params, [](auto const& prm) { return prm.key == "initial"; });
    layer.params.insert(layer.params.begin(), {"initial", std::to_string(bytes / MiB) + "MiB"});
  }
  return spec::to_string(s);
}

bool grew(trace::replay_result const& r)
{
  return r.peak_held_bytes > r.held_at_start;
}

/// A pool stack worth resizing: it grew, or it starts at more than twice what the trace needs.
bool pool_needs_resizing(resource_run const& r, trace::trace_profile const& p)
{
  return r.error.empty() && !r.result.failure && has_layer(r.spec, "pool") &&
         (grew(r.result) || r.result.held_at_start > 2 * pool_initial_for(p));
}

std::string pool_note(resource_run const& r, trace::trace_profile const& p)
{
  auto const& res = r.result;
  return (grew(res) ? "the stack held " + human_bytes(res.held_at_start) +
                          " before the first allocation and grew to " +
                          human_bytes(res.peak_held_bytes) + " (a pool grows by at least doubling)"
                    : "the pool takes " + human_bytes(res.held_at_start) + " up front") +
         "; the trace needs at most " + human_bytes(p.peak_live_bytes) + " live";
}

/// Why `s` (the replay of a resized `r`) is suggested, with what its replay measured.
std::string suggestion_why(resource_run const& r, resource_run const& s,
                           trace::trace_profile const& p)
{
  return pool_note(r, p) + "; replayed, " + s.spec + " held " +
         human_bytes(s.result.peak_held_bytes) + " (held/live " +
         std::to_string(s.result.footprint_ratio(p)).substr(0, 5) + ")" +
         (grew(s.result) ? ", growing once more" : " without growing");
}

std::string failure_note(resource_run const& r, trace::trace_profile const& p)
{
  auto const& f = *r.result.failure;
  return r.spec + " ran out of memory at event " + std::to_string(f.event) + " (line " +
         std::to_string(f.line) + ")" +
         (reached_peak(r, p) ? ", after the trace's peak"
                             : ", before the trace's peak: it has no numbers at the peak");
}

}  // namespace

std::string speed_basis(bool simulated)
{
  return simulated ? "host bookkeeping only (simulated device)" : "GPU";
}

bool reached_peak(resource_run const& r, trace::trace_profile const& p)
{
  return r.error.empty() && (!r.result.failure || r.result.failure->event > p.peak_live_event);
}

std::vector<std::string> pool_candidates(resource_run const& r, trace::trace_profile const& p)
{
  if (p.peak_live_bytes == 0 || !pool_needs_resizing(r, p)) { return {}; }
  std::vector<std::string> out;
  for (double const factor : {1.0, 1.25, 1.5}) {
    out.push_back(with_pool_initial(r.spec, pool_initial_for(p, factor)));
  }
  return out;
}

std::optional<reservation> reservation_of(resource_run const& r, trace::trace_profile const& p)
{
  if (!r.error.empty()) { return std::nullopt; }
  auto const& res = r.result;
  if (has_layer(r.spec, "arena") && res.held_at_start != 0) {
    return reservation{res.held_at_start,
                       "the arena reserves " + human_bytes(res.held_at_start) +
                           " up front (by default half of the device's free memory; arena:size= "
                           "sets it): its footprint is that reservation, not what the trace "
                           "needs (" +
                           human_bytes(p.peak_live_bytes) + " live at the peak)"};
  }
  if (has_layer(r.spec, "pool")) {
    auto const bytes = grew(res) ? res.peak_held_bytes - res.held_at_start : res.held_at_start;
    return reservation{bytes, pool_note(r, p)};
  }
  if (res.held_at_start != 0) {
    return reservation{res.held_at_start, "the stack holds " + human_bytes(res.held_at_start) +
                                              " before the first allocation (taken up front)"};
  }
  return std::nullopt;
}

bool is_baseline(std::string const& spec_text)
{
  try {
    auto const layers = spec::parse_resource_spec(spec_text).layers;
    return std::all_of(layers.begin(), layers.end(), [](auto const& l) {
      return l.name == "cuda" || spec::find_entry(l.name).kind == spec::resource_kind::adaptor;
    });
  } catch (std::exception const&) {
    return false;
  }
}

namespace {

/// The finished stacks that compete (not the baseline), with their figures.
std::vector<contender> contenders(trace_run const& t)
{
  std::vector<contender> out;
  for (auto const& r : t.runs) {
    if (!r.error.empty() || r.result.failure || is_baseline(r.spec)) { continue; }
    auto const f = figures_of(r, t.profile);
    out.push_back({r.spec, f.footprint_ratio, f.speed});
  }
  return out;
}

void pick_leanest(verdict& v, std::vector<contender> c)
{
  std::stable_sort(c.begin(), c.end(),
                   [](auto const& a, auto const& b) { return a.ratio < b.ratio; });
  v.leanest       = c[0].spec;
  v.leanest_ratio = c[0].ratio;
  v.leanest_clear = c.size() == 1 || c[1].ratio > c[0].ratio;
  if (c.size() > 1) { v.leanest_runner_up = c[1]; }
}

void pick_fastest(verdict& v, std::vector<contender> c)
{
  std::stable_sort(c.begin(), c.end(),
                   [](auto const& a, auto const& b) { return a.speed.median < b.speed.median; });
  v.fastest           = c[0].spec;
  v.fastest_speed     = c[0].speed;
  v.fastest_ns_per_op = c[0].speed.median;
  v.fastest_clear     = c.size() == 1 || !overlaps(c[0].speed, c[1].speed);
  if (c.size() > 1) { v.fastest_runner_up = c[1]; }
  v.repeats = c[0].speed.ns_per_op.size();
  for (auto const& x : c) { v.repeats = std::min(v.repeats, x.speed.ns_per_op.size()); }
}

std::string baseline_note(trace_run const& t)
{
  for (auto const& r : t.runs) {
    if (!r.error.empty() || r.result.failure || !is_baseline(r.spec)) { continue; }
    auto const f = figures_of(r, t.profile);
    char buf[160];
    std::snprintf(buf, sizeof buf, " (held/live %.3f, median %.1f ns/op)", f.footprint_ratio,
                  f.speed.median);
    return r.spec + buf +
           " is the baseline (cudaMalloc and cudaFree for every request): it competes in neither";
  }
  return {};
}

}  // namespace

verdict verdict_of(trace_run const& t, bool simulated)
{
  verdict v;
  v.speed_basis = speed_basis(simulated);
  auto const& p = t.profile;
  if (p.peak_live_bytes == 0) {  // held/live means nothing, and no size fits better
    v.notes.push_back("the trace never has a byte live: there is nothing to compare");
    return v;
  }
  for (auto const& r : t.runs) {
    if (!r.error.empty()) {
      v.notes.push_back(r.spec + " could not be built: " + r.error);
      continue;
    }
    if (r.result.failure) {
      v.notes.push_back(failure_note(r, p));
      continue;
    }
    auto const& s = t.suggested;
    if (!v.suggested && s && pool_needs_resizing(r, p) && s->error.empty() && !s->result.failure &&
        s->result.peak_held_bytes < r.result.peak_held_bytes) {
      v.suggested = suggestion{s->spec, suggestion_why(r, *s, p)};
    }
  }
  auto const c    = contenders(t);
  auto const base = baseline_note(t);
  if (!c.empty()) {
    pick_leanest(v, c);
    pick_fastest(v, c);
  } else {
    v.notes.push_back(base.empty() ? "no stack replayed the whole trace"
                                   : "no stack but the baseline replayed the whole trace");
  }
  if (!base.empty()) { v.notes.push_back(base); }
  if (simulated) {
    v.notes.push_back(
        "speeds on the simulated device are host bookkeeping only: no GPU work is done, so ns/op "
        "compares the resources' own CPU cost, not GPU allocation latency");
  }
  return v;
}

}  // namespace gpumem::tool
