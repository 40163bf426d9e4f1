// gpumem — replay, simulate, benchmark and picture GPU allocation traces.
// This file only parses arguments; the commands live in the other files of this folder.
#include "commands.hpp"
#include "replay_command.hpp"

#include <gpumem/spec/resource_factory.hpp>
#include <gpumem/trace/trace_event.hpp>

#include <cuda/version>
#include <cuda_runtime_api.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace gpumem;
using namespace gpumem::tool;

constexpr char const* main_help =
    R"(gpumem — replay, simulate, benchmark and picture GPU allocation traces

Usage:
  gpumem [--simulate[=CAPACITY]] [--report DIR] [--resource SPEC]...
      The default run: replays the bundled traces over every suballocator, prints a table and
      writes an HTML report (default folder ./gpumem-report). Without a GPU (or with --simulate)
      it runs on a simulated address space of CAPACITY (default 80GiB); on a GPU, device memory.
  gpumem replay TRACE... [--resource SPEC]... [options]   replay your traces
  gpumem bench [--resource SPEC]... [--smoke] [--json]    allocation microbenchmarks
  gpumem info                                             what this machine's CUDA offers
  gpumem convert SNAPSHOT.pickle -o TRACE.csv             PyTorch memory snapshot -> trace
  gpumem synth OUT.csv [--events N]                       a synthetic trace of any length
  gpumem COMMAND --help                                   more about each command
  gpumem --version                                        gpumem's version and its CCCL

Examples:
  gpumem
  gpumem replay run.csv --resource pool:initial=1GiB --resource arena --simulate=40GB
  gpumem replay run.csv --resource 'statistics>pool>cuda_async' --json
  gpumem bench --resource pool --workload pair --smoke
)";

constexpr char const* replay_help = R"(gpumem replay — replay allocation traces over resource stacks

Usage: gpumem replay TRACE... [--resource SPEC]... [options]

A trace is the CSV written by logging_resource_adaptor (Thread,Time,Action,Pointer,Size,Stream),
or by `gpumem convert` from a PyTorch memory snapshot. Each trace is replayed over each stack from
a cold start; the table shows the peak memory held, held / peak live bytes, internal and external
fragmentation and the largest free block at the peak of live bytes, and host time per operation.

Options:
  -r, --resource SPEC    a resource stack (repeatable; default: every suballocator). Grammar:
                         name[:key=value,...] stacked with '>' (outermost first), e.g.
                         pool:initial=1GiB,max=4GiB>cuda_async. Sizes take units (KiB, MiB,
                         GiB, KB, MB, GB). A stack not ending in a leaf gets 'cuda' appended.
      --simulate[=CAP]   use a simulated address space of CAP bytes (default 80GiB) even on a GPU
      --threads          replay each trace thread on its own host thread, in the trace's order
      --json | --csv     machine-readable output instead of the table
      --report DIR       also write DIR/index.html (+ results.json, results.csv)
      --repeat N         time each stack over N replays (1-100, default 5): the table shows the
                         median ns/op and its spread, and the verdict says when the spreads overlap
      --no-progress      no progress bar on stderr
      --list-resources   every resource name with its parameters and defaults

Exit status: 0 ok; 1 error; 2 bad arguments or bad trace; 3 a replay ran out of memory or a
stack could not be built (the table says where and why).

Examples:
  gpumem replay train.csv
  gpumem replay train.csv -r pool -r 'binning:min=512B>pool:initial=0' --simulate=16GiB
  gpumem replay a.csv b.csv -r arena --threads --csv > results.csv
)";

constexpr char const* bench_help = R"(gpumem bench — allocation microbenchmarks

Usage: gpumem bench [--resource SPEC]... [--workload NAME]... [options]

Workloads: pair (alloc+free of one size), random_small, random_large, threads (1..16 threads,
each on its own stream), replay (each trace cold then warm). On a GPU the peers cuda (cudaMalloc),
cuda_malloc_async (release threshold at maximum) and cub_caching (CUB's CachingDeviceAllocator)
always run beside the chosen resources.

Options:
  -r, --resource SPEC    a stack to measure (repeatable; default: every suballocator)
  -w, --workload NAME    only this workload (repeatable)
      --trace FILE       trace for the replay workload (repeatable; default: bundled traces)
      --simulate[=CAP]   on the simulated device even on a GPU
      --smoke            a few iterations of everything (for CI; numbers are meaningless)
      --json             JSON instead of tables
      --no-progress      no progress bar on stderr
      --profile FILE     also sample where the host threads spend the timed loops' time and
                         write a flat profile by function, for each row and stack, to FILE
                         (function names of gpumem itself need addr2line, from binutils)

Examples:
  gpumem bench
  gpumem bench -r pool -r arena -w threads
  gpumem bench -r 'binning>pool' -w threads --profile threads-profile.txt
  gpumem bench --smoke --json
)";

constexpr char const* info_help = R"(gpumem info — devices, memory, pool support, IPC handle types,
VMM granularity, driver and runtime versions. Says plainly when there is no GPU.

Usage: gpumem info
)";

constexpr char const* convert_help = R"(gpumem convert — PyTorch memory snapshot to a gpumem trace

Usage: gpumem convert SNAPSHOT.pickle [-o TRACE.csv] [--device N] [--python PYTHON]

Capture in PyTorch:
  torch.cuda.memory._record_memory_history(max_entries=1000000)
  ... run the workload ...
  torch.cuda.memory._dump_snapshot("snapshot.pickle")
Then: gpumem convert snapshot.pickle -o trace.csv && gpumem replay trace.csv
Needs python3 (standard library only). Default output: SNAPSHOT with .csv.
)";

constexpr char const* synth_help = R"(gpumem synth — write a synthetic trace

Usage: gpumem synth OUT.csv [--events N] [--seed S] [--threads T] [--streams S] [--max-live N]

Sizes are log-uniform 256 B..64 MiB; allocations and frees interleave at random with at most
--max-live (default 4096) blocks live. Example: gpumem synth big.csv --events 20000000
)";

/// A command-line word as a message repeats it: at most 80 bytes, then "..." and its size.
std::string shown(std::string const& word)
{
  constexpr std::size_t most = 80;
  if (word.size() <= most) { return word; }
  return word.substr(0, most) + "... (" + std::to_string(word.size()) + " bytes)";
}

/// Thrown for bad command lines; main prints it with the command's --help hint.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class args {
 public:
  args(std::string cmd, std::vector<std::string> v) : cmd_{std::move(cmd)}, v_{std::move(v)} {}
  [[nodiscard]] bool done() const { return i_ >= v_.size(); }
  std::string const& peek() const { return v_[i_]; }
  std::string take() { return v_[i_++]; }
  /// The value of an option given as `--opt VALUE` or `--opt=VALUE`.
  std::string value(std::string const& opt, std::string const& arg)
  {
    auto const eq = arg.find('=');
    if (eq != std::string::npos) { return arg.substr(eq + 1); }
    if (done()) { throw usage_error{"option " + opt + " needs a value"}; }
    return take();
  }
  [[noreturn]] void unknown(std::string const& arg) const
  {
    throw usage_error{"unknown option '" + shown(arg) + "' for 'gpumem" +
                      (cmd_.empty() ? "" : " ") + cmd_ + "'"};
  }
  std::string const& command() const { return cmd_; }

 private:
  std::string cmd_;
  std::vector<std::string> v_;
  std::size_t i_{};
};

bool is(std::string const& arg, char const* name)
{
  return arg == name || arg.rfind(std::string{name} + "=", 0) == 0;
}

/// Whether `word` reads as a size (4096, 16GiB, max).
bool looks_like_size(std::string const& word)
{
  try {
    (void)spec::parse_size(word);
    return true;
  } catch (spec::spec_error const&) {
    return false;
  }
}

/// A whole number in [lo, hi]: digits only (no sign, no spaces), no overflow.
std::uint64_t count_value(std::string const& opt, std::string const& v, std::uint64_t lo,
                          std::uint64_t hi)
{
  auto const range =
      " (give a whole number from " + std::to_string(lo) + " to " + std::to_string(hi) + ")";
  std::uint64_t n = 0;
  bool overflow   = false;
  for (char c : v) {
    if (c < '0' || c > '9') {
      throw usage_error{opt + ": '" + shown(v) + "' is not a count" + range};
    }
    overflow = overflow || __builtin_mul_overflow(n, 10U, &n) ||
               __builtin_add_overflow(n, static_cast<std::uint64_t>(c - '0'), &n);
  }
  if (v.empty()) { throw usage_error{opt + " needs a value" + range}; }
  if (overflow || n < lo || n > hi) {
    throw usage_error{opt + ": " + shown(v) + " is out of range" + range};
  }
  return n;
}

/// --simulate's optional capacity, as `--simulate=16GiB` or `--simulate 16GiB` (the next word,
/// when it reads as a size and names no file): a size from 1 KiB to spec::most_device_bytes.
void simulate_capacity(args& a, std::string const& arg, std::size_t& capacity)
{
  auto const eq = arg.find('=');
  std::string value;
  if (eq != std::string::npos) {
    value = arg.substr(eq + 1);
  } else if (!a.done() && looks_like_size(a.peek()) && !std::filesystem::exists(a.peek())) {
    value = a.take();
  } else {
    return;
  }
  capacity = spec::parse_size_in(value, "--simulate capacity", std::size_t{1} << 10,
                                 spec::most_device_bytes);
}

/// Options shared by the default run and `replay`; false when `a` is not one of them.
bool replay_option(args& a, std::string const& arg, replay_command_options& o)
{
  if (arg == "-r" || is(arg, "--resource")) {
    o.resources.push_back(a.value("--resource", arg));
  } else if (is(arg, "--simulate")) {
    o.simulate = true;
    simulate_capacity(a, arg, o.capacity_bytes);
  } else if (arg == "--threads") {
    o.threads = true;
  } else if (arg == "--json") {
    o.format = output_format::json;
  } else if (arg == "--csv") {
    o.format = output_format::csv;
  } else if (is(arg, "--report")) {
    o.report_dir = a.value("--report", arg);
  } else if (arg == "--no-progress") {
    o.progress = false;
  } else if (is(arg, "--repeat")) {
    o.repeats = count_value("--repeat", a.value("--repeat", arg), 1, 100);
  } else {
    return false;
  }
  return true;
}

int list_resources()
{
  std::cout << spec::describe_factory();
  return 0;
}

int cmd_replay(args& a, bool default_run)
{
  replay_command_options o;
  if (default_run) { o.report_dir = "gpumem-report"; }
  while (!a.done()) {
    auto arg = a.take();
    if (arg == "--help" || arg == "-h") {
      return std::cout << (default_run ? main_help : replay_help), 0;
    }
    if (arg == "--list-resources") { return list_resources(); }
    if (default_run && arg == "--no-report") {
      o.report_dir.clear();
    } else if (replay_option(a, arg, o)) {
    } else if (!default_run && (arg.empty() || arg[0] != '-')) {
      o.traces.push_back(arg);
    } else {
      a.unknown(arg);
    }
  }
  if (!default_run && o.traces.empty()) {
    throw usage_error{"give at least one trace: gpumem replay TRACE.csv"};
  }
  return print_and_report(run_replays(o), o);
}

int cmd_bench(args& a)
{
  bench_options o;
  static std::vector<std::string> const workloads{"pair", "random_small", "random_large", "threads",
                                                  "replay"};
  while (!a.done()) {
    auto arg = a.take();
    if (arg == "--help" || arg == "-h") { return std::cout << bench_help, 0; }
    if (arg == "-r" || is(arg, "--resource")) {
      o.resources.push_back(a.value("--resource", arg));
    } else if (arg == "-w" || is(arg, "--workload")) {
      auto w = a.value("--workload", arg);
      if (std::find(workloads.begin(), workloads.end(), w) == workloads.end()) {
        throw usage_error{"unknown workload '" + shown(w) +
                          "'; the workloads are pair, random_small, random_large, threads, replay"};
      }
      o.workloads.push_back(w);
    } else if (is(arg, "--trace")) {
      o.traces.push_back(a.value("--trace", arg));
    } else if (is(arg, "--simulate")) {
      o.simulate = true;
      simulate_capacity(a, arg, o.capacity_bytes);
    } else if (arg == "--smoke") {
      o.smoke = true;
    } else if (arg == "--json") {
      o.json = true;
    } else if (arg == "--no-progress") {
      o.progress = false;
    } else if (is(arg, "--profile")) {
      o.profile = a.value("--profile", arg);
    } else {
      a.unknown(arg);
    }
  }
  return run_bench(o);
}

int cmd_convert(args& a)
{
  std::string in, out, device = "0", python = "python3";
  while (!a.done()) {
    auto arg = a.take();
    if (arg == "--help" || arg == "-h") { return std::cout << convert_help, 0; }
    if (arg == "-o" || is(arg, "--output")) {
      out = a.value("--output", arg);
    } else if (is(arg, "--python")) {
      python = a.value("--python", arg);
    } else if (is(arg, "--device")) {
      device = a.value("--device", arg);
    } else if (in.empty() && !arg.empty() && arg[0] != '-') {
      in = arg;
    } else {
      a.unknown(arg);
    }
  }
  if (in.empty()) {
    throw usage_error{"give the snapshot: gpumem convert SNAPSHOT.pickle -o OUT.csv"};
  }
  if (out.empty()) { out = in.substr(0, in.rfind('.')) + ".csv"; }
  return run_convert(in, out, device, python);
}

int cmd_synth(args& a)
{
  synth_options o;
  while (!a.done()) {
    auto arg = a.take();
    if (arg == "--help" || arg == "-h") { return std::cout << synth_help, 0; }
    if (is(arg, "--events")) {
      o.events = count_value("--events", a.value("--events", arg), 0, synth_options::most_events);
    } else if (is(arg, "--seed")) {
      o.seed = count_value("--seed", a.value("--seed", arg), 0, UINT64_MAX);
    } else if (is(arg, "--threads")) {
      o.threads = static_cast<unsigned>(
          count_value("--threads", a.value("--threads", arg), 1, synth_options::most_ids));
    } else if (is(arg, "--streams")) {
      o.streams = static_cast<unsigned>(
          count_value("--streams", a.value("--streams", arg), 0, synth_options::most_ids));
    } else if (is(arg, "--max-live")) {
      o.max_live =
          count_value("--max-live", a.value("--max-live", arg), 1, synth_options::most_live);
    } else if (o.out.empty() && !arg.empty() && arg[0] != '-') {
      o.out = arg;
    } else {
      a.unknown(arg);
    }
  }
  if (o.out.empty()) { throw usage_error{"give the output file: gpumem synth OUT.csv"}; }
  return run_synth(o);
}

int cmd_info(args& a)
{
  while (!a.done()) {
    auto arg = a.take();
    if (arg == "--help" || arg == "-h") { return std::cout << info_help, 0; }
    a.unknown(arg);
  }
  return run_info();
}

int print_version()
{
  std::cout << "gpumem " << GPUMEM_VERSION_STRING << " (CCCL " << CCCL_MAJOR_VERSION << '.'
            << CCCL_MINOR_VERSION << '.' << CCCL_PATCH_VERSION << ", CUDA runtime "
            << CUDART_VERSION / 1000 << '.' << CUDART_VERSION % 1000 / 10 << ")\n";
  return 0;
}

int dispatch(std::vector<std::string> v)
{
  std::string cmd;
  if (!v.empty() && !v[0].empty() && v[0][0] != '-') {
    cmd = v[0];
    v.erase(v.begin());
  }
  if (cmd.empty() && v.size() == 1 && v[0] == "--version") { return print_version(); }
  args a{cmd, std::move(v)};
  if (cmd.empty()) { return cmd_replay(a, true); }
  if (cmd == "replay") { return cmd_replay(a, false); }
  if (cmd == "bench") { return cmd_bench(a); }
  if (cmd == "info") { return cmd_info(a); }
  if (cmd == "convert") { return cmd_convert(a); }
  if (cmd == "synth") { return cmd_synth(a); }
  if (cmd == "help") { return std::cout << main_help, 0; }
  throw usage_error{"unknown command '" + shown(cmd) +
                    "'; the commands are replay, bench, info, "
                    "convert, synth"};
}

}  // namespace

int main(int argc, char** argv)
{
  std::vector<std::string> v(argv + 1, argv + argc);
  try {
    return dispatch(std::move(v));
  } catch (usage_error const& e) {
    std::cerr << "gpumem: " << e.what() << "\n(see gpumem --help)\n";
    return 2;
  } catch (trace::trace_error const& e) {
    std::cerr << "gpumem: bad trace: " << e.what() << "\n";
    return 2;
  } catch (spec::spec_error const& e) {
    std::cerr << "gpumem: " << e.what() << "\n";
    return 2;
  } catch (std::exception const& e) {
    std::cerr << "gpumem: " << e.what() << "\n";
    return 1;
  }
}
