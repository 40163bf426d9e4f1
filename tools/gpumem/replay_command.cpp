// Replaying traces over resource stacks (default run and `gpumem replay`).
#include "replay_command.hpp"

#include "checked_output.hpp"
#include "device.hpp"
#include "progress.hpp"
#include "report.hpp"
#include "verdict.hpp"

#include <gpumem/align.hpp>
#include <gpumem/spec/resource_factory.hpp>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>

#ifndef GPUMEM_TOOL_TRACE_DIR
#define GPUMEM_TOOL_TRACE_DIR "traces"
#endif

namespace gpumem::tool {
namespace {

std::vector<std::string> default_resources(bool simulated)
{
  std::vector<std::string> specs;
  for (auto const& e : spec::factory_table()) {
    if (!e.default_run.empty() && !(simulated && e.needs_gpu)) {
      specs.emplace_back(e.default_run);
    }
  }
  return specs;
}

std::string device_name(bool simulated, std::size_t capacity)
{
  if (simulated) {
    return "simulated device of " + spec::size_to_string(capacity) +
           " (addresses only, no memory touched; stream work completes at once)";
  }
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    return "GPU";
  }
  return std::string{prop.name} + " (device " + std::to_string(dev) + ")";
}

/// The trace's sizes whose granted bytes in `stack` are not the size rounded up to 256 B.
std::vector<std::pair<std::size_t, std::size_t>> granted_sizes(trace::trace_profile const& p,
                                                               spec::resource_stack const& stack)
{
  auto const grant = stack.grant_function();
  std::map<std::size_t, std::size_t> out;
  for (auto const& a : p.allocation_log) {
    if (out.contains(a.size)) { continue; }
    auto const given = grant ? std::max<std::size_t>(grant(a.size), a.size)
                             : align_up(a.size, CUDA_ALLOCATION_ALIGNMENT);
    out.emplace(a.size, given);
  }
  std::erase_if(out, [](auto const& kv) {
    return kv.second == align_up(kv.first, CUDA_ALLOCATION_ALIGNMENT);
  });
  return {out.begin(), out.end()};
}

/// Replays `path` over `spec_text` once (into `run`); the stack is built by the caller.
/// Without a profile yet (`tr.profile.compact` empty), the trace is profiled in the same pass and
/// the profile kept in `tr`; later replays use that profile.
trace::replay_result replay_once(trace_run& tr, std::string const& path,
                                 spec::resource_stack& stack, target& dev,
                                 replay_command_options const& options, progress_bar& bar)
{
  trace::replay_options ro;
  ro.threads         = options.threads;
  ro.stream_of       = [&dev](std::uint64_t id) { return dev.stream_of(id); };
  auto const label   = std::filesystem::path{path}.filename().string() + " " + stack.spec();
  ro.progress.report = [&](std::size_t done, std::size_t total) { bar.update(label, done, total); };
  if (tr.profile.compact) { return trace::replay(tr.profile, stack, dev.meter(), ro); }
  auto both  = trace::profile_and_replay(path, stack, dev.meter(), ro);
  tr.profile = std::move(both.profile);
  return std::move(both.result);
}

/// --driver-calls: the driver calls of one more replay over `stack`, which has just replayed the
/// trace cold (the warm pass a training loop makes from its second step on). Not for a stack with
/// a logging layer: its log would hold the trace twice. Empty when the replay fails.
std::optional<trace::driver_call_counts> warm_calls(trace_run& tr, std::string const& path,
                                                    std::string const& spec_text,
                                                    spec::resource_stack& stack, target& dev,
                                                    replay_command_options const& options,
                                                    progress_bar& bar)
{
  for (auto const& layer : spec::parse_resource_spec(spec_text).layers) {
    if (layer.name == "logging") { return std::nullopt; }
  }
  dev.meter().count_driver_calls(true);
  auto warm = replay_once(tr, path, stack, dev, options, bar);
  dev.synchronize();
  if (warm.failure) { return std::nullopt; }
  return warm.driver_calls;
}

/// Replays `path` over `spec_text` on fresh stacks until `options.repeats` replays are timed (a
/// replay that also profiled the trace is not timed: the profiling thread shares the host). The
/// figures come from the first replay; one that failed or ran out of memory is not repeated.
resource_run run_one(trace_run& tr, std::string const& path, std::string const& spec_text,
                     replay_command_options const& options, bool simulated, progress_bar& bar)
{
  resource_run run;
  run.spec          = spec_text;
  auto const wanted = std::max<std::size_t>(options.repeats, 1);
  for (bool first = true; run.seconds.size() < wanted; first = false) {
    target dev{{.simulate = simulated, .capacity_bytes = options.capacity_bytes}};
    spec::resource_stack stack;
    try {
      stack = spec::build(spec_text, dev.meter(), simulated);
    } catch (spec::spec_error const&) {
      throw;
    } catch (std::exception const& e) {
      run.error = e.what();
      return run;
    }
    bool const profiling = !tr.profile.compact;
    dev.meter().count_driver_calls(options.driver_calls && first);  // the cold pass only
    auto result = replay_once(tr, path, stack, dev, options, bar);
    dev.synchronize();
    if (!profiling) { run.seconds.push_back(result.seconds); }
    if (!first) { continue; }
    stack.flush_logs();  // a log that could not be written fails the command
    run.spec     = stack.spec();
    run.counters = stack.counters();
    run.granted  = granted_sizes(tr.profile, stack);
    run.result   = std::move(result);
    if (run.result.failure) {
      if (run.seconds.empty()) { run.seconds.push_back(run.result.seconds); }
      break;
    }
    if (options.driver_calls) {
      run.warm_driver_calls = warm_calls(tr, path, spec_text, stack, dev, options, bar);
    }
  }
  return run;
}

/// Fails before any work for what can be known up front: a malformed spec, an unknown resource or
/// parameter, a logging layer whose file is one of the traces.
void check_specs(std::vector<std::string> const& specs, std::vector<std::string> const& traces)
{
  for (auto const& s : specs) {
    for (auto const& layer : spec::parse_resource_spec(s).layers) {
      auto const& entry = spec::find_entry(layer.name);
      spec::layer_args const args{layer, entry};
      if (layer.name == "logging") { refuse_input_as_output(args.text("file"), traces); }
    }
  }
}

/// A finished replay that held less than `best` (or the first finished one).
bool better(resource_run const& run, std::optional<resource_run> const& best)
{
  bool const finished = run.error.empty() && !run.result.failure;
  return finished && (!best || run.result.peak_held_bytes < best->result.peak_held_bytes);
}

/// Replays the pool sizes worth suggesting for the first pool stack that needs resizing, until
/// one does not grow; keeps the best in tr.suggested. Needs the trace's profile (a replay done).
void try_pool_sizes(trace_run& tr, std::string const& path, replay_command_options const& options,
                    bool simulated, progress_bar& bar)
{
  if (!tr.profile.compact) { return; }
  auto once    = options;  // a suggestion is about memory: its replay is not timed again
  once.repeats = 1;
  for (auto const& r : tr.runs) {
    auto const candidates = pool_candidates(r, tr.profile);
    for (auto const& c : candidates) {
      auto run = run_one(tr, path, c, once, simulated, bar);
      bool const no_growth =
          better(run, tr.suggested) && run.result.peak_held_bytes <= run.result.held_at_start;
      if (better(run, tr.suggested)) { tr.suggested = std::move(run); }
      if (no_growth) { break; }
    }
    if (!candidates.empty()) { return; }
  }
}

/// Replays one trace over every spec into `tr`.
void run_trace(trace_run& tr, std::string const& path, std::vector<std::string> const& specs,
               replay_command_options const& options, bool simulated, progress_bar& bar)
{
  for (auto const& s : specs) { tr.runs.push_back(run_one(tr, path, s, options, simulated, bar)); }
  try_pool_sizes(tr, path, options, simulated, bar);
  if (!tr.profile.compact) {  // no stack could be built: the trace is still described
    tr.profile = trace::profile_trace(
        path, {[&](std::size_t d, std::size_t t) { bar.update("reading " + path, d, t); }});
  }
  tr.profile.compact.reset();    // the events' temporary file is not needed any more
  if (tr.profile.events == 0) {  // an empty file, or one of a header only: nothing replayed
    bar.finish();
    std::cerr << "gpumem: warning: " << path
              << " holds no events (is it empty, or was it written by a program that stopped "
                 "before its first allocation?); its results are all zero\n";
  }
  if (tr.profile.truncated_line != 0) {
    bar.finish();
    std::cerr << "gpumem: warning: " << path << ":" << tr.profile.truncated_line
              << ": the last line is cut off (no newline, not a whole event); replayed the "
                 "events before it\n";
  }
}

/// The bundled traces' folder: where an install (share/gpumem/traces) or the Python package
/// (gpumem/traces beside gpumem/bin) puts it, else the source tree's.
std::filesystem::path bundled_trace_dir()
{
  std::error_code ec;
  auto const self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (auto const& c :
         {self.parent_path() / "../share/gpumem/traces", self.parent_path() / "../traces"}) {
      if (std::filesystem::is_directory(c, ec)) { return c; }
    }
  }
  return GPUMEM_TOOL_TRACE_DIR;
}

}  // namespace

std::vector<std::string> bundled_traces()
{
  std::vector<std::string> out;
  std::error_code ec;
  for (auto const& entry : std::filesystem::directory_iterator{bundled_trace_dir(), ec}) {
    if (entry.path().extension() == ".csv") { out.push_back(entry.path().string()); }
  }
  std::sort(out.begin(), out.end());
  return out;
}

replay_report run_replays(replay_command_options const& options)
{
  replay_report report;
  report.simulated      = options.simulate || !why_no_gpu().empty();
  report.capacity_bytes = options.capacity_bytes;
  report.device         = device_name(report.simulated, options.capacity_bytes);
  auto const traces     = options.traces.empty() ? bundled_traces() : options.traces;
  if (traces.empty()) {
    throw trace::trace_error{bundled_trace_dir().string(), 0,
                             "no bundled traces found; give trace files: gpumem replay TRACE.csv"};
  }
  auto const specs =
      options.resources.empty() ? default_resources(report.simulated) : options.resources;
  check_specs(specs, traces);
  progress_bar bar{options.progress};
  for (auto const& path : traces) {
    trace_run tr;
    try {
      run_trace(tr, path, specs, options, report.simulated, bar);
    } catch (...) {
      if (report.traces.empty()) { throw; }  // nothing finished: only the error to say
      report.interrupted    = std::current_exception();
      report.interrupted_at = path;
      break;
    }
    report.traces.push_back(std::move(tr));
  }
  bar.finish();
  return report;
}

}  // namespace gpumem::tool

namespace gpumem::tool {

int print_and_report(replay_report const& report, replay_command_options const& options)
{
  if (report.interrupted) {
    std::cerr << "gpumem: stopped at " << report.interrupted_at << "; the results of the "
              << report.traces.size() << " trace(s) before it follow\n";
  }
  switch (options.format) {
    case output_format::table:
      write_table(std::cout, report);
      break;
    case output_format::json:
      write_json(std::cout, report, false);
      break;
    case output_format::csv:
      write_csv(std::cout, report);
      break;
  }
  std::cout.flush();
  if (!std::cout) { throw output_error{"cannot write the results to standard output"}; }
  if (!options.report_dir.empty()) {
    auto const page = write_report_folder(
        options.report_dir, report, options.traces.empty() ? bundled_traces() : options.traces);
    (options.format == output_format::table ? std::cout : std::cerr)
        << "\nreport: " << page
        << " (open it in any browser; results.json and results.csv beside)\n";
  }
  if (report.interrupted) { std::rethrow_exception(report.interrupted); }
  for (auto const& t : report.traces) {
    for (auto const& r : t.runs) {
      if (!r.error.empty() || r.result.failure) { return 3; }
    }
  }
  return 0;
}

}  // namespace gpumem::tool
