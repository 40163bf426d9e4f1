// The report's conclusions in words (see verdict.hpp).
#include "verdict.hpp"

#include "report.hpp"

#include <gpumem/spec/resource_spec.hpp>

#include <algorithm>

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

/// The trace's peak live bytes rounded up to a MiB: a pool that starts this large need not grow.
std::size_t pool_initial_for(trace::trace_profile const& p)
{
  return std::max<std::size_t>((p.peak_live_bytes + MiB - 1) / MiB * MiB, MiB);
}

/// `spec_text` with its pool layer's initial size set to `bytes`.
std::string with_pool_initial(std::string const& spec_text, std::size_t bytes)
{
  auto s = spec::parse_resource_spec(spec_text);
  for (auto& layer : s.layers) {
    if (layer.name != "pool") { continue; }
    std::erase_if(layer.params, [](auto const& prm) { return prm.key == "initial"; });
    layer.params.insert(layer.params.begin(), {"initial", spec::size_to_string(bytes)});
  }
  return spec::to_string(s);
}

bool pool_grew(resource_run const& r)
{
  return r.result.peak_held_bytes > r.result.held_at_start;
}

/// A pool stack worth resizing: it grew, or it starts at more than twice what the trace needs.
bool pool_needs_resizing(resource_run const& r, trace::trace_profile const& p)
{
  return r.error.empty() && !r.result.failure && has_layer(r.spec, "pool") &&
         (pool_grew(r) || r.result.held_at_start > 2 * pool_initial_for(p));
}

std::string pool_note(resource_run const& r, trace::trace_profile const& p)
{
  auto const& res    = r.result;
  auto const initial = pool_initial_for(p);
  std::string note   = pool_grew(r)
                           ? "the pool started with " + human_bytes(res.held_at_start) +
                               " and grew (each growth at least doubles it) to " +
                               human_bytes(res.peak_held_bytes)
                           : "the pool takes " + human_bytes(res.held_at_start) + " up front";
  note += "; the trace needs at most " + human_bytes(p.peak_live_bytes) + " live";
  if (pool_needs_resizing(r, p)) {
    note += "; " + with_pool_initial(r.spec, initial) +
            " starts at that, rounded up to a MiB (not replayed: check it with gpumem replay)";
  }
  return note;
}

std::string failure_note(resource_run const& r, trace::trace_profile const& p)
{
  auto const& f = *r.result.failure;
  return r.spec + " ran out of memory at event " + std::to_string(f.event + 1) + " (line " +
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
    auto const bytes = pool_grew(r) ? res.peak_held_bytes - res.held_at_start : res.held_at_start;
    return reservation{bytes, pool_note(r, p)};
  }
  if (res.held_at_start != 0) {
    return reservation{res.held_at_start, "the stack holds " + human_bytes(res.held_at_start) +
                                              " before the first allocation (taken up front)"};
  }
  return std::nullopt;
}

verdict verdict_of(trace_run const& t, bool simulated)
{
  verdict v;
  v.speed_basis = speed_basis(simulated);
  auto const& p = t.profile;
  for (auto const& r : t.runs) {
    if (!r.error.empty()) {
      v.notes.push_back(r.spec + " could not be built: " + r.error);
      continue;
    }
    if (r.result.failure) {
      v.notes.push_back(failure_note(r, p));
      continue;
    }
    auto const ratio = r.result.footprint_ratio(p);
    auto const ns    = r.result.ns_per_operation();
    if (v.leanest.empty() || ratio < v.leanest_ratio) {
      v.leanest = r.spec, v.leanest_ratio = ratio;
    }
    if (v.fastest.empty() || ns < v.fastest_ns_per_op) {
      v.fastest = r.spec, v.fastest_ns_per_op = ns;
    }
    if (!v.suggested && pool_needs_resizing(r, p)) {
      v.suggested = suggestion{with_pool_initial(r.spec, pool_initial_for(p)), pool_note(r, p)};
    }
  }
  if (v.leanest.empty()) { v.notes.push_back("no stack replayed the whole trace"); }
  if (simulated) {
    v.notes.push_back(
        "speeds on the simulated device are host bookkeeping only: no GPU work is done, so ns/op "
        "compares the resources' own CPU cost, not GPU allocation latency");
  }
  return v;
}

}  // namespace gpumem::tool
