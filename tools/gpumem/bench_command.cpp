// `gpumem bench`: the workloads of BENCHMARKS.md over chosen stacks, with the peers beside them on
// a GPU. Each workload starts from a freshly built stack (cold). Host time only.
#include "checked_output.hpp"
#include "commands.hpp"
#include "device.hpp"
#include "figures.hpp"
#include "json_writer.hpp"
#include "progress.hpp"
#include "replay_command.hpp"
#include "report.hpp"
#include "sampling_profile.hpp"
#include "torch_peer.hpp"

#include <gpumem/spec/resource_factory.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <exception>
#include <system_error>
#include <thread>

namespace gpumem::tool {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0)
{
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// One table: rows (a size, a thread count, a trace) x columns (resources).
struct bench_table {
  std::string title;
  std::vector<std::string> rows;
  std::map<std::string, std::map<std::string, std::string>> cells;  ///< row -> resource -> text
  std::map<std::string, std::map<std::string, double>> values;      ///< for JSON
  std::vector<std::string> notes;  ///< counters of counting layers, one line per row and stack
  std::vector<std::string> peer_columns;  ///< columns after the stacks (peers in a child process)
};

struct bench_context {
  bench_options const& options;
  bool simulated;
  std::vector<std::string> specs;
  progress_bar& bar;
  sampling_profile* profile{};  ///< when --profile is on
};

/// A freshly built stack on a fresh target.
struct bench_stack {
  target dev;
  spec::resource_stack stack;
  bench_stack(bench_context const& c, std::string const& s)
      : dev{{.simulate = c.simulated, .capacity_bytes = c.options.capacity_bytes}},
        stack{spec::build(s, dev.meter(), c.simulated)}
  {
  }
};

/// Each measurement stops after this long (slow peers such as cudaMalloc would take minutes).
constexpr double time_cap_seconds = 2.0;

/// One step of a random walk: allocate `value` bytes, or free live block number `value` (the last
/// live block then takes its place).
struct walk_step {
  bool alloc;
  std::size_t value;
};

/// A random interleaving of `ops` allocations and frees, sizes log-uniform in [lo, hi], at most
/// `max_live` live. Drawn before timing, so the timed loop measures the resource, not the drawing.
std::vector<walk_step> draw_walk(std::size_t ops, std::size_t max_live, double lo, double hi,
                                 std::uint64_t seed)
{
  std::mt19937_64 rng{seed};
  std::uniform_real_distribution<double> size_exponent{std::log(lo), std::log(hi)};
  std::vector<walk_step> steps;
  steps.reserve(ops);
  std::size_t live = 0;
  for (std::size_t i = 0; i < ops; ++i) {
    bool const alloc = live == 0 || (live < max_live && (rng() & 1) == 0);
    if (alloc) {
      steps.push_back({true, static_cast<std::size_t>(std::exp(size_exponent(rng)))});
      ++live;
    } else {
      steps.push_back({false, static_cast<std::size_t>(rng() % live)});
      --live;
    }
  }
  return steps;
}

struct walk_result {
  double ns_per_op;
  std::size_t ops;
};

/// Runs `steps` on `r` and stream `s`, until done or time_cap_seconds have passed; frees what is
/// still live afterwards (untimed).
walk_result random_walk(mr::device_memory_resource& r, cudaStream_t s,
                        std::vector<walk_step> const& steps)
{
  std::vector<std::pair<void*, std::size_t>> live;
  live.reserve(steps.size());
  sampling_profile::measured_scope const measured;
  auto const t0 = clock_type::now();
  std::size_t i = 0;
  for (; i < steps.size() && (i % 256 != 0 || seconds_since(t0) < time_cap_seconds); ++i) {
    auto const [alloc, value] = steps[i];
    if (alloc) {
      live.emplace_back(r.allocate(value, s), value);
    } else {
      r.deallocate(live[value].first, live[value].second, s);
      live[value] = live.back();
      live.pop_back();
    }
  }
  walk_result const result{
      seconds_since(t0) * 1e9 / static_cast<double>(std::max<std::size_t>(i, 1)), i};
  for (auto [p, n] : live) { r.deallocate(p, n, s); }
  return result;
}

std::string fmt(double v, int digits = 0)
{
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

void put(bench_table& t, std::string const& row, std::string const& res, double v, int digits)
{
  if (std::find(t.rows.begin(), t.rows.end(), row) == t.rows.end()) { t.rows.push_back(row); }
  t.cells[row][res]  = fmt(v, digits);
  t.values[row][res] = v;
}

void put_error(bench_table& t, std::string const& row, std::string const& res,
               std::string const& why)
{
  if (std::find(t.rows.begin(), t.rows.end(), row) == t.rows.end()) { t.rows.push_back(row); }
  t.cells[row][res] = "n/a";
  std::cerr << "  " << t.title.substr(0, t.title.find(':')) << " " << row << " " << res << ": "
            << why.substr(0, why.find('\n')) << "\n";
}

void note_counters(bench_table& t, std::string const& row, std::string const& res,
                   std::vector<std::pair<std::string, double>> const& counters)
{
  t.notes.push_back(row + ", " + res + ": " + describe_counters(counters));
  for (auto const& [name, value] : counters) { t.values[row][res + ":" + name] = value; }
}

/// Runs `fn` for each spec on a fresh stack, recording failures as n/a.
template <class Fn>
void each_stack(bench_context const& c, bench_table& t, std::string const& row, Fn&& fn)
{
  for (auto const& s : c.specs) {
    c.bar.update(t.title.substr(0, t.title.find(':')) + " " + row + " " + s, 0, 1);
    try {
      bench_stack b{c, s};
      if (c.profile != nullptr) {
        c.profile->begin(t.title.substr(0, t.title.find(':')) + " " + row + " " + s);
      }
      fn(b, s);
      if (c.profile != nullptr) { c.profile->end(); }
      b.dev.synchronize();
      if (auto const k = b.stack.counters(); !k.empty()) { note_counters(t, row, s, k); }
    } catch (spec::spec_error const&) {
      throw;
    } catch (std::exception const& e) {
      put_error(t, row, s, e.what());
    }
  }
}

bench_table pair_workload(bench_context const& c)
{
  bench_table t{"pair: allocate + free of one size on one stream, ns per pair (lower is better)"};
  std::size_t const max_iters = c.options.smoke ? 50 : 20000;
  for (std::size_t size : {std::size_t{256}, std::size_t{4} << 10, std::size_t{64} << 10,
                           std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{256} << 20}) {
    auto const row = human_bytes(size);
    each_stack(c, t, row, [&](bench_stack& b, std::string const& s) {
      auto& r         = b.stack.top();
      cudaStream_t st = b.dev.new_stream();
      for (std::size_t i = 0; i < std::min<std::size_t>(1000, max_iters); ++i) {  // warm-up
        r.deallocate(r.allocate(size, st), size, st);
      }
      std::size_t n = 0;
      sampling_profile::measured_scope const measured;
      auto const t0 = clock_type::now();
      for (; n < max_iters && (n % 64 != 0 || seconds_since(t0) < 0.25); ++n) {
        r.deallocate(r.allocate(size, st), size, st);
      }
      put(t, row, s, seconds_since(t0) * 1e9 / static_cast<double>(n), 0);
    });
  }
  return t;
}

bench_table random_workload(bench_context const& c, bool large)
{
  bench_table t{large
                    ? "random_large: 20k ops, 256 B..256 MiB log-uniform, <= 100 live, ns per op"
                    : "random_small: 200k ops, 256 B..4 MiB log-uniform, <= 1000 live, ns per op"};
  std::size_t ops = large ? 20000 : 200000;
  if (c.options.smoke) { ops /= 100; }
  each_stack(c, t, large ? "random_large" : "random_small",
             [&](bench_stack& b, std::string const& s) {
               auto const steps = draw_walk(ops, large ? 100 : 1000, 256.0,
                                            large ? 256.0 * (1 << 20) : 4.0 * (1 << 20), 42);
               auto const w     = random_walk(b.stack.top(), b.dev.new_stream(), steps);
               put(t, large ? "random_large" : "random_small", s, w.ns_per_op, 0);
             });
  return t;
}

/// Holds threads until all `n` have arrived, then lets them go together and notes the time: the
/// timed region starts with every thread created and ready.
class start_gate {
 public:
  explicit start_gate(unsigned n) : n_{n} {}
  void arrive_and_wait()
  {
    if (arrived_.fetch_add(1) + 1 == n_) { open(); }
    while (!open_.load(std::memory_order_acquire)) { std::this_thread::yield(); }
  }
  /// Lets every waiting thread go (also when a thread could not be created).
  void open()
  {
    opened_at_.store(clock_type::now().time_since_epoch().count(), std::memory_order_relaxed);
    open_.store(true, std::memory_order_release);
  }
  [[nodiscard]] clock_type::time_point opened_at() const
  {
    return clock_type::time_point{clock_type::duration{opened_at_.load()}};
  }

 private:
  unsigned const n_;
  std::atomic<unsigned> arrived_{0};
  std::atomic<bool> open_{false};
  std::atomic<clock_type::rep> opened_at_{0};
};

/// Runs fn(0) .. fn(n-1) on threads of their own; after all have ended, rethrows the first
/// exception any of them threw (an allocation that failed), or the system's refusal of a thread.
template <class Fn>
void run_on_threads(unsigned n, start_gate& gate, Fn&& fn)
{
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> pool;
  std::exception_ptr refused;
  for (unsigned i = 0; i < n && !refused; ++i) {
    try {
      pool.emplace_back([&, i] {
        try {
          fn(i);
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    } catch (std::system_error const&) {
      refused = std::current_exception();
      gate.open();
    }
  }
  for (auto& th : pool) { th.join(); }
  if (refused) { std::rethrow_exception(refused); }
  for (auto const& e : errors) {
    if (e) { std::rethrow_exception(e); }
  }
}

/// An allocator that does nothing (hands out addresses it counts up, never memory): the threads
/// workload over one of these per thread measures the walk and the machine alone, a reference for
/// how far any stack can scale on this host.
class walk_alone_resource final : public mr::device_memory_resource {
  void* do_allocate(std::size_t bytes, cuda_stream_view) override
  {
    next_ += (bytes + 255) & ~std::uintptr_t{255};
    return reinterpret_cast<void*>(next_);
  }
  void do_deallocate(void*, std::size_t, cuda_stream_view) noexcept override {}
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override
  {
    return this == &other;
  }
  std::uintptr_t next_{std::uintptr_t{1} << 40};
};

/// Aggregate million ops/s of `threads` threads, each running its own walk on resource_of(i) and
/// stream_of(i).
template <class ResourceOf, class StreamOf>
double run_walks(unsigned threads, std::size_t ops, ResourceOf&& resource_of, StreamOf&& stream_of)
{
  std::vector<std::size_t> done(threads);
  start_gate gate{threads};
  run_on_threads(threads, gate, [&](unsigned i) {
    auto const steps = draw_walk(ops, 64, 256.0, 65536.0, 7 + i);
    gate.arrive_and_wait();
    done[i] = random_walk(resource_of(i), stream_of(i), steps).ops;
  });
  double total = 0;
  for (auto d : done) { total += static_cast<double>(d); }
  return total / seconds_since(gate.opened_at()) / 1e6;
}

bench_table threads_workload(bench_context const& c)
{
  bench_table t{
      "threads: each thread its own stream, 1M ops of 256 B..64 KiB, <= 64 live each; "
      "aggregate million ops/s (higher is better)"};
  // A million operations a thread: long enough (tens of ms) that the stack's first growth and the
  // caches' first misses do not decide the one-thread figure.
  std::size_t const ops = c.options.smoke ? 500 : 1000000;
  std::vector<unsigned> counts{1, 2, 4, 8, 16};
  if (c.options.smoke) { counts = {1, 2}; }
  for (unsigned threads : counts) {
    auto const row = std::to_string(threads) + " thread(s)";
    each_stack(c, t, row, [&](bench_stack& b, std::string const& s) {
      std::vector<cudaStream_t> streams;
      for (unsigned i = 0; i < threads; ++i) { streams.push_back(b.dev.new_stream()); }
      auto& top = b.stack.top();
      put(t, row, s,
          run_walks(
              threads, ops, [&](unsigned) -> mr::device_memory_resource& { return top; },
              [&](unsigned i) { return streams[i]; }),
          2);
    });
    std::vector<walk_alone_resource> alone(threads);
    auto const reference = run_walks(
        threads, ops, [&](unsigned i) -> mr::device_memory_resource& { return alone[i]; },
        [](unsigned) { return cudaStream_t{}; });
    t.notes.push_back(row + ", the walk alone (an allocator that does nothing, one per thread): " +
                      fmt(reference, 2) + " M ops/s");
    t.values[row]["walk_alone"] = reference;
  }
  return t;
}

/// PyTorch's allocator, default and with expandable segments, beside the stacks (on a GPU, or when
/// a peer script is named): a column each; a peer that cannot run says why once, in the notes.
void add_torch_peers(bench_context const& c, bench_table& t, std::vector<std::string> const& traces)
{
  for (bool expandable : {false, true}) {
    std::string const name = torch_peer_name(expandable);
    if (c.simulated && !torch_peer_overridden()) {
      t.notes.push_back(name + ": skipped: it needs a GPU (this run is on the simulated device)");
      continue;
    }
    t.peer_columns.push_back(name);
    std::string skipped;
    std::size_t done = 0;
    for (auto const& path : traces) {
      auto const row = std::filesystem::path{path}.filename().string();
      c.bar.update("replay " + row + " " + name, 0, 1);
      auto const o = run_torch_peer(path, expandable);
      if (!o.result) {
        skipped = o.skipped;
        break;  // the same reason holds for every trace
      }
      auto const& r = *o.result;
      put(t, row, name, r.cold_ns_per_event, 0);
      t.cells[row][name] = fmt(r.cold_ns_per_event) + " / " + fmt(r.warm_ns_per_event) + " / " +
                           fmt(r.used_over_live, 3);
      t.values[row][name + ":warm_ns"]         = r.warm_ns_per_event;
      t.values[row][name + ":footprint_ratio"] = r.used_over_live;
      ++done;
    }
    if (!skipped.empty()) {
      if (done == 0) { std::erase(t.peer_columns, name); }
      t.notes.push_back(name + ": skipped: " + skipped);
    }
  }
}

bench_table replay_workload(bench_context const& c)
{
  constexpr int warm_passes = 3;  // replays after the cold one; the table gives their median
  bench_table t{"replay: cold ns/event / warm ns/event (median of " + std::to_string(warm_passes) +
                " passes) / peak held / peak live (PyTorch peers: peak device used, read after "
                "every allocation, / peak live)"};
  auto traces = c.options.traces.empty() ? bundled_traces() : c.options.traces;
  for (auto const& path : traces) {
    auto const profile = trace::profile_trace(path);
    auto const row     = std::filesystem::path{path}.filename().string();
    each_stack(c, t, row, [&](bench_stack& b, std::string const& s) {
      trace::replay_options ro;
      ro.stream_of = [&](std::uint64_t id) { return b.dev.stream_of(id); };
      sampling_profile::measured_scope measured;
      double cold_ns = 0;
      double ratio   = 0;  // the largest of the passes
      std::vector<double> warm_seconds;
      std::uint64_t operations = 0;
      for (int pass = 0; pass <= warm_passes; ++pass) {  // pass 0: cold, over a fresh stack
        auto const r = trace::replay(profile, b.stack, b.dev.meter(), ro);
        if (r.failure) {
          put_error(t, row, s, "out of memory: " + r.failure->message);
          return;
        }
        ratio = std::max(ratio, r.footprint_ratio(profile));
        if (pass == 0) {
          cold_ns = r.ns_per_operation();
        } else {
          warm_seconds.push_back(r.seconds);
          operations = r.operations;
        }
      }
      auto const warm_ns = timing_of(warm_seconds, operations).median;
      put(t, row, s, cold_ns, 0);
      t.cells[row][s]               = fmt(cold_ns) + " / " + fmt(warm_ns) + " / " + fmt(ratio, 3);
      t.values[row][s + ":warm_ns"] = warm_ns;
      t.values[row][s + ":footprint_ratio"] = ratio;
    });
  }
  add_torch_peers(c, t, traces);
  return t;
}

void print_text(std::vector<bench_table> const& tables, bench_context const& c)
{
  for (auto const& t : tables) {
    std::cout << "\n" << t.title << "\n";
    std::size_t w0 = 14;
    for (auto const& r : t.rows) { w0 = std::max(w0, r.size() + 2); }
    auto columns = c.specs;
    columns.insert(columns.end(), t.peer_columns.begin(), t.peer_columns.end());
    std::cout << std::string(w0, ' ');
    for (auto const& s : columns) { std::cout << " | " << s; }
    std::cout << "\n";
    for (auto const& r : t.rows) {
      std::cout << r << std::string(w0 - r.size(), ' ');
      for (auto const& s : columns) {
        auto it   = t.cells.at(r).find(s);
        auto cell = it == t.cells.at(r).end() ? std::string{"-"} : it->second;
        std::cout << " | " << std::string(s.size() > cell.size() ? s.size() - cell.size() : 0, ' ')
                  << cell;
      }
      std::cout << "\n";
    }
    for (auto const& n : t.notes) { std::cout << "  " << n << "\n"; }
  }
}

/// `v` rounded to 3 decimals, as the table shows it (null when not finite).
nlohmann::ordered_json three_decimals(double v)
{
  if (!std::isfinite(v)) { return nullptr; }
  return std::strtod(fmt(v, 3).c_str(), nullptr);
}

void print_json(std::vector<bench_table> const& tables, std::string const& device, bool smoke)
{
  json_writer w{std::cout};
  w.begin_object();
  w.member("device", device);
  w.member("smoke", smoke);
  w.key("workloads");
  w.begin_array();
  for (auto const& t : tables) {
    w.begin_object();
    w.member("title", t.title);
    w.key("rows");
    w.begin_object();
    for (auto const& r : t.rows) {
      w.key(r);
      w.begin_object();
      for (auto const& [k, v] : t.values.at(r)) { w.member(k, three_decimals(v)); }
      w.end_object();
    }
    w.end_object();
    if (!t.notes.empty()) { w.member("notes", t.notes); }
    w.end_object();
  }
  w.end_array();
  w.end_object();
  std::cout << "\n";
}

std::vector<std::string> default_specs(bool simulated)
{
  std::vector<std::string> specs;
  for (auto const& e : spec::factory_table()) {
    if (!e.default_run.empty() && !(simulated && e.needs_gpu)) {
      specs.emplace_back(e.default_run);
    }
  }
  return specs;
}

}  // namespace

int run_bench(bench_options const& options)
{
  bool const simulated = options.simulate || !why_no_gpu().empty();
  progress_bar bar{options.progress};
  bench_context c{options, simulated,
                  options.resources.empty() ? default_specs(simulated) : options.resources, bar};
  if (!simulated) {  // the peers are always beside the chosen resources on a GPU
    for (char const* peer : {"cuda", "cuda_malloc_async", "cub_caching"}) {
      if (std::find(c.specs.begin(), c.specs.end(), peer) == c.specs.end()) {
        c.specs.emplace_back(peer);
      }
    }
  }
  for (auto const& s : c.specs) { (void)spec::parse_resource_spec(s); }
  auto want = [&](char const* w) {
    return options.workloads.empty() ||
           std::find(options.workloads.begin(), options.workloads.end(), w) !=
               options.workloads.end();
  };
  std::optional<sampling_profile> profile;
  std::optional<checked_output> profile_out;  // opened before the run, so that it fails first
  if (!options.profile.empty()) {
    auto inputs = options.traces.empty() ? bundled_traces() : options.traces;
    profile_out.emplace(options.profile, inputs);
    c.profile = &profile.emplace();
  }
  std::vector<bench_table> tables;
  if (want("pair")) { tables.push_back(pair_workload(c)); }
  if (want("random_small")) { tables.push_back(random_workload(c, false)); }
  if (want("random_large")) { tables.push_back(random_workload(c, true)); }
  if (want("threads")) { tables.push_back(threads_workload(c)); }
  if (want("replay")) { tables.push_back(replay_workload(c)); }
  bar.finish();
  std::string const device =
      simulated ? "simulated device (host time of the allocators' bookkeeping; no GPU)" : "GPU";
  if (options.json) {
    print_json(tables, device, options.smoke);
  } else {
    std::cout << "gpumem bench on " << device
              << (options.smoke ? " -- smoke run, numbers are not "
                                  "meaningful"
                                : "")
              << "\n";
    print_text(tables, c);
  }
  if (profile) {
    profile->write(profile_out->stream());
    profile_out->commit();
  }
  return 0;
}

}  // namespace gpumem::tool
