// The report's figures, each computed once (see figures.hpp).
#include "figures.hpp"

#include "verdict.hpp"

#include <algorithm>
#include <unordered_map>

namespace gpumem::tool {

timing timing_of(std::vector<double> const& seconds, std::uint64_t operations)
{
  timing t;
  if (seconds.empty() || operations == 0) { return t; }
  for (auto const s : seconds) { t.ns_per_op.push_back(s * 1e9 / static_cast<double>(operations)); }
  auto sorted = t.ns_per_op;
  std::sort(sorted.begin(), sorted.end());
  auto const n = sorted.size();
  t.median     = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0;
  t.min        = sorted.front();
  t.max        = sorted.back();
  return t;
}

bool overlaps(timing const& a, timing const& b) noexcept
{
  return a.min <= b.max && b.min <= a.max;
}

run_figures figures_of(resource_run const& r, trace::trace_profile const& p)
{
  auto const& res = r.result;
  run_figures f;
  f.peak_held_bytes = res.peak_held_bytes;
  f.footprint_ratio = res.footprint_ratio(p);
  f.at_peak_known   = reached_peak(r, p);
  if (f.at_peak_known) {
    f.at_peak                = res.at_peak;
    f.internal_fragmentation = res.at_peak.internal_fragmentation();
    f.external_fragmentation = res.at_peak.external_fragmentation();
  }
  f.speed =
      timing_of(r.seconds.empty() ? std::vector<double>{res.seconds} : r.seconds, res.operations);
  return f;
}

std::vector<stack_share> live_at_peak_by_stack(trace::trace_profile const& p)
{
  auto const at = p.peak_live_event;
  std::unordered_map<std::int32_t, stack_share> by_stack;
  for (auto const& a : p.allocation_log) {
    if (a.alloc_event > at) { break; }  // the log is in event order
    if (a.free_event != -1 && static_cast<std::uint64_t>(a.free_event) <= at) { continue; }
    auto& s = by_stack[a.stack];
    s.stack = a.stack;
    s.bytes += a.size;
    ++s.blocks;
  }
  std::vector<stack_share> out;
  out.reserve(by_stack.size());
  for (auto const& [_, s] : by_stack) { out.push_back(s); }
  std::sort(out.begin(), out.end(), [](stack_share const& a, stack_share const& b) {
    if (a.bytes != b.bytes) { return a.bytes > b.bytes; }
    if (a.blocks != b.blocks) { return a.blocks > b.blocks; }
    return a.stack < b.stack;
  });
  return out;
}

}  // namespace gpumem::tool
