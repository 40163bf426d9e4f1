// gpumem — replay, simulate, benchmark and picture GPU allocation traces.
// This file only defines the command line, with CLI11: each option's names, value, check, conflicts
// and --help line come from one definition here. The commands live in the other files of this
// folder; option_values.hpp checks values, usage.hpp refuses what CLI11 leaves over.
#include "commands.hpp"
#include "help_format.hpp"
#include "option_values.hpp"
#include "replay_command.hpp"
#include "usage.hpp"

#include <gpumem/spec/resource_factory.hpp>
#include <gpumem/spec/resource_spec.hpp>
#include <gpumem/trace/trace_event.hpp>

#include <CLI/CLI.hpp>
#include <cuda/version>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace {

using namespace gpumem;
using namespace gpumem::tool;

constexpr std::size_t least_capacity = std::size_t{1} << 10;
std::vector<std::string> const workload_names{"pair", "random_small", "random_large", "threads",
                                              "replay"};

std::string version_text()
{
  return "gpumem " GPUMEM_VERSION_STRING " (CCCL " + std::to_string(CCCL_MAJOR_VERSION) + '.' +
         std::to_string(CCCL_MINOR_VERSION) + '.' + std::to_string(CCCL_PATCH_VERSION) +
         ", CUDA runtime " + std::to_string(CUDART_VERSION / 1000) + '.' +
         std::to_string(CUDART_VERSION % 1000 / 10) + ")";
}

/// An option given any number of times with one value each: `-r A -r B` (never `-r A B`, which
/// would swallow a trace named B).
CLI::Option* repeatable(CLI::Option* opt)
{
  return opt->expected(1)->allow_extra_args(false)->multi_option_policy(
      CLI::MultiOptionPolicy::TakeAll);
}

/// A flag that only counts (CLI11 2.1 finds a string literal's help ambiguous).
CLI::Option* plain_flag(CLI::App& app, std::string name, std::string const& help)
{
  return app.add_flag(std::move(name), help);
}

/// `--simulate[=SIZE]`: a flag whose value comes only after '=' (prepare_words turns
/// `--simulate SIZE` into that), so that a trace after it is never read as its value.
class simulate_option {
 public:
  void define(CLI::App& app, std::size_t default_bytes)
  {
    auto const range = "from " + spec::size_to_string(least_capacity) + " to " +
                       spec::size_to_string(spec::most_device_bytes);
    option_ = app.add_flag("--simulate{" + spec::size_to_string(default_bytes) + "}", text_,
                           "use a simulated address space of SIZE bytes (default " +
                               spec::size_to_string(default_bytes) + ",\n" + range +
                               ") even on a GPU; --simulate=SIZE or\n--simulate SIZE");
    option_->check(size_between(least_capacity, spec::most_device_bytes))
        ->option_text("[SIZE]")
        ->disable_flag_override(false)
        ->multi_option_policy(CLI::MultiOptionPolicy::Throw);
  }
  /// After parsing: sets `simulate` and `capacity` when the option was given.
  void apply(bool& simulate, std::size_t& capacity) const
  {
    if (option_->count() == 0) { return; }
    simulate = true;
    capacity = spec::parse_size(text_);
  }

 private:
  std::string text_;
  CLI::Option* option_{};
};

/// The command line: the root app (the default run) and its commands, each bound to its options
/// and to what runs it once they are parsed.
class command_line {
 public:
  command_line();
  /// Parses `words` (the arguments without the program's name); returns the exit status.
  int run(std::vector<std::string> words);
  /// "(see gpumem replay --help)": where the command line that failed is described.
  [[nodiscard]] std::string hint() { return "(see " + command_name(failed()) + " --help)"; }
  [[nodiscard]] std::string message(CLI::ParseError const& e) { return usage_message(e, failed()); }

 private:
  static void define_replay_options(CLI::App& app, replay_command_options& o, simulate_option& sim);
  void define_default_run();
  void define_replay();
  void define_bench();
  void define_info();
  void define_convert();
  void define_synth();
  void define_help();
  [[nodiscard]] CLI::App& chosen();
  /// The command a refused command line was for: the one parsed, else the one its first word names.
  [[nodiscard]] CLI::App& failed();
  int print_help(CLI::App const& app) const;

  CLI::App root_;
  std::map<CLI::App const*, std::function<int()>> runs_;

  replay_command_options default_run_, replay_;
  simulate_option default_simulate_, replay_simulate_, bench_simulate_;
  bench_options bench_;
  struct {
    std::string snapshot, output, device{"0"}, python{"python3"};
  } convert_;
  synth_options synth_;
  std::string help_topic_;
  std::string first_word_;
};

command_line::command_line()
    : root_{
          "gpumem — replay, simulate, benchmark and picture GPU allocation traces\n\n"
          "With no command, the default run: replays the bundled traces over every "
          "suballocator,\nprints a table and writes an HTML report (default folder "
          "./gpumem-report). Without a GPU\n(or with --simulate) it runs on a simulated address "
          "space; on a GPU, device memory.",
          "gpumem"}
{
  root_.formatter(std::make_shared<help_format>());
  root_.set_help_flag("-h,--help", "this help");
  root_.option_defaults()->disable_flag_override();  // --json=no is refused, not read as "false"
  root_.require_subcommand(0, 1);
  root_.set_version_flag("--version", version_text(), "gpumem's version and its CCCL, then exit");
  define_default_run();
  define_replay();
  define_bench();
  define_info();
  define_convert();
  define_synth();
  define_help();
  root_.allow_extras();  // refuse_leftovers says what was wrong with them
  for (auto* sub : root_.get_subcommands([](CLI::App const*) { return true; })) {
    sub->allow_extras()->group("Commands");
  }
  root_.footer(
      "Examples:\n"
      "  gpumem\n"
      "  gpumem replay run.csv --resource pool:initial=1GiB --resource arena --simulate=40GB\n"
      "  gpumem replay run.csv --resource 'statistics>pool>cuda_async' --json\n"
      "  gpumem bench --resource pool --workload pair --smoke\n"
      "  gpumem COMMAND --help      (or gpumem help COMMAND) more about each command");
}

/// The options shared by the default run and `replay`.
void command_line::define_replay_options(CLI::App& app, replay_command_options& o,
                                         simulate_option& sim)
{
  repeatable(app.add_option("-r,--resource", o.resources,
                            "a resource stack (repeatable; default: every suballocator).\n"
                            "Grammar: name[:key=value,...] stacked with '>' (outermost\n"
                            "first), e.g. pool:initial=1GiB,max=4GiB>cuda_async. Sizes take\n"
                            "units (KiB, MiB, GiB, KB, MB, GB). A stack not ending in a leaf\n"
                            "gets 'cuda' appended."))
      ->type_name("SPEC")
      ->check(not_empty("a resource spec such as pool"));
  sim.define(app, o.capacity_bytes);
  app.add_flag("--threads", o.threads,
               "replay each trace thread on its own host thread, in the trace's order");
  auto* json = app.add_flag_callback(
      "--json", [&o] { o.format = output_format::json; }, "JSON instead of the table");
  auto* csv = app.add_flag_callback(
      "--csv", [&o] { o.format = output_format::csv; }, "CSV instead of the table");
  json->excludes(csv);
  app.add_option("--report", o.report_dir,
                 o.report_dir.empty() ? "also write DIR/index.html (+ results.json, results.csv)"
                                      : "write the report into DIR (default " + o.report_dir +
                                            "):\nindex.html, results.json, results.csv")
      ->type_name("DIR")
      ->check(not_empty("a folder"));
  app.add_option("--repeat", o.repeats,
                 "time each stack over N replays (1-100, default 5): the table shows\n"
                 "the median ns/op and its spread, and the verdict says when the\n"
                 "spreads overlap")
      ->type_name("N")
      ->transform(count_between(1, 100));
  app.add_flag("--no-progress{false}", o.progress, "no progress bar on stderr");
  app.add_flag("--driver-calls", o.driver_calls,
               "also count and time each stack's calls into CUDA (creates, maps,\n"
               "access grants, unmaps, releases, synchronizations, ...) in its\n"
               "first replay, which starts cold (a fresh stack), and in one more\n"
               "replay over the same stack, warm (not for a stack that logs)");
}

/// --list-resources: a listing instead of a run, so it goes alone.
CLI::Option* define_list_resources(CLI::App& app)
{
  return plain_flag(app, "--list-resources",
                    "every resource name with its parameters and defaults\n(give it alone)");
}

/// Prints the resource listing when --list-resources was given (alone, else a usage_error).
bool listed_resources(CLI::App const& app, CLI::Option const* list)
{
  if (list->count() == 0) { return false; }
  for (auto const* opt : app.get_options()) {
    if (opt != list && opt->count() > 0) {
      throw usage_error{"--list-resources goes alone; " + opt->get_name() + " was given with it"};
    }
  }
  std::cout << spec::describe_factory();
  return true;
}

void command_line::define_default_run()
{
  default_run_.report_dir = "gpumem-report";
  define_replay_options(root_, default_run_, default_simulate_);
  auto* no_report = plain_flag(root_, "--no-report", "no report folder");
  no_report->excludes("--report");
  auto* list    = define_list_resources(root_);
  runs_[&root_] = [this, no_report, list] {
    if (listed_resources(root_, list)) { return 0; }
    default_simulate_.apply(default_run_.simulate, default_run_.capacity_bytes);
    if (no_report->count() > 0) { default_run_.report_dir.clear(); }
    return print_and_report(run_replays(default_run_), default_run_);
  };
}

void command_line::define_replay()
{
  auto* app = root_.add_subcommand(
      "replay",
      "replay allocation traces over resource stacks\n\n"
      "A trace is the CSV written by logging_resource_adaptor (Thread,Time,Action,Pointer,Size,\n"
      "Stream), or by `gpumem convert` from a PyTorch memory snapshot. Each trace is replayed\n"
      "over each stack from a cold start; the table shows the peak memory held, held / peak\n"
      "live bytes, internal and external fragmentation and the largest free block at the peak\n"
      "of live bytes, and host time per operation.");
  app->add_option("TRACE", replay_.traces, "trace files (CSV) to replay, in order")
      ->type_name("")
      ->check(not_empty("a trace file"));
  define_replay_options(*app, replay_, replay_simulate_);
  auto* list = define_list_resources(*app);
  app->footer(
      "Exit status: 0 ok; 1 error; 2 bad arguments or bad trace; 3 a replay ran out of memory\n"
      "or a stack could not be built (the table says where and why).\n\n"
      "Examples:\n"
      "  gpumem replay train.csv\n"
      "  gpumem replay train.csv -r pool -r 'binning:min=512B>pool:initial=0' --simulate=16GiB\n"
      "  gpumem replay a.csv b.csv -r arena --threads --csv > results.csv");
  runs_[app] = [this, app, list] {
    if (listed_resources(*app, list)) { return 0; }
    if (replay_.traces.empty()) {
      throw usage_error{"give at least one trace: gpumem replay TRACE.csv"};
    }
    replay_simulate_.apply(replay_.simulate, replay_.capacity_bytes);
    return print_and_report(run_replays(replay_), replay_);
  };
}

void command_line::define_bench()
{
  auto* app = root_.add_subcommand(
      "bench",
      "allocation microbenchmarks\n\n"
      "Workloads: pair (alloc+free of one size), random_small, random_large, threads (1..16\n"
      "threads, each on its own stream), replay (each trace cold, then warm: the median of 3\n"
      "passes). On a GPU the peers cuda (cudaMalloc), cuda_malloc_async (release threshold at\n"
      "maximum) and cub_caching (CUB's CachingDeviceAllocator) always run beside the chosen\n"
      "resources.");
  auto& o = bench_;
  repeatable(app->add_option("-r,--resource", o.resources,
                             "a stack to measure (repeatable; default: every suballocator)"))
      ->type_name("SPEC")
      ->check(not_empty("a resource spec such as pool"));
  repeatable(app->add_option("-w,--workload", o.workloads,
                             "only this workload (repeatable; default: all of\n" +
                                 CLI::detail::join(workload_names, ", ") + ")"))
      ->type_name("NAME")
      ->check(one_of("workload", workload_names));
  repeatable(
      app->add_option("--trace", o.traces,
                      "a trace for the replay workload (repeatable; default: the\nbundled traces)"))
      ->type_name("FILE")
      ->check(not_empty("a trace file"));
  bench_simulate_.define(*app, o.capacity_bytes);
  app->add_flag("--smoke", o.smoke,
                "a few iterations of everything (for CI; numbers are meaningless)");
  app->add_flag("--json", o.json, "JSON instead of tables");
  app->add_flag("--no-progress{false}", o.progress, "no progress bar on stderr");
  app->add_option("--profile", o.profile,
                  "also sample where the host threads spend the timed loops' time\n"
                  "and write a flat profile by function, for each row and stack,\n"
                  "to FILE (function names of gpumem itself need addr2line, from\n"
                  "binutils)")
      ->type_name("FILE")
      ->check(not_empty("a file"));
  app->footer(
      "Examples:\n"
      "  gpumem bench\n"
      "  gpumem bench -r pool -r arena -w threads\n"
      "  gpumem bench -r 'binning>pool' -w threads --profile threads-profile.txt\n"
      "  gpumem bench --smoke --json");
  runs_[app] = [this] {
    auto& o = bench_;
    if (!o.traces.empty() && !o.workloads.empty() &&
        std::find(o.workloads.begin(), o.workloads.end(), "replay") == o.workloads.end()) {
      throw usage_error{
          "--trace is read only by the replay workload; add -w replay or leave out -w"};
    }
    bench_simulate_.apply(o.simulate, o.capacity_bytes);
    return run_bench(o);
  };
}

void command_line::define_info()
{
  auto* app = root_.add_subcommand(
      "info",
      "what this machine's CUDA offers\n\n"
      "Devices, memory, pool support, IPC handle types, VMM granularity, driver and runtime\n"
      "versions. Says plainly when there is no GPU.");
  runs_[app] = [] { return run_info(); };
}

void command_line::define_convert()
{
  auto* app = root_.add_subcommand("convert", "PyTorch memory snapshot -> gpumem trace");
  auto& o   = convert_;
  app->add_option("SNAPSHOT", o.snapshot, "the snapshot (a .pickle file)")
      ->type_name("")
      ->required()
      ->check(not_empty("the snapshot file"));
  app->add_option("-o,--output", o.output, "the trace to write (default: SNAPSHOT with .csv)")
      ->type_name("FILE")
      ->check(not_empty("a file"));
  app->add_option("--device", o.device, "the device whose allocations to take (default 0)")
      ->type_name("N")
      ->transform(count_between(0, INT_MAX));
  app->add_option("--python", o.python, "the Python 3 to run the converter (default python3)")
      ->type_name("PYTHON")
      ->check(not_empty("a program such as python3"));
  app->footer(
      "Capture in PyTorch:\n"
      "  torch.cuda.memory._record_memory_history(max_entries=1000000)\n"
      "  ... run the workload ...\n"
      "  torch.cuda.memory._dump_snapshot(\"snapshot.pickle\")\n"
      "Then: gpumem convert snapshot.pickle -o trace.csv && gpumem replay trace.csv\n"
      "Needs python3 (standard library only).");
  runs_[app] = [this] {
    auto& o = convert_;
    if (o.output.empty()) { o.output = o.snapshot.substr(0, o.snapshot.rfind('.')) + ".csv"; }
    return run_convert(o.snapshot, o.output, o.device, o.python);
  };
}

void command_line::define_synth()
{
  auto* app = root_.add_subcommand(
      "synth",
      "write a synthetic trace of any length\n\n"
      "Sizes are log-uniform 256 B..64 MiB; allocations and frees interleave at random with at\n"
      "most --max-live blocks live.");
  auto& o = synth_;
  app->add_option("OUT", o.out, "the trace to write (CSV)")
      ->type_name("")
      ->required()
      ->check(not_empty("the file to write"));
  app->add_option("--events", o.events, "allocations and frees to write (default 10000000)")
      ->type_name("N")
      ->transform(count_between(0, synth_options::most_events));
  app->add_option("--seed", o.seed, "the random seed (default 1)")
      ->type_name("S")
      ->transform(count_between(0, UINT64_MAX));
  app->add_option("--threads", o.threads, "threads the trace names (default 1)")
      ->type_name("T")
      ->transform(count_between(1, synth_options::most_ids));
  app->add_option("--streams", o.streams, "streams the trace names (default 1)")
      ->type_name("S")
      ->transform(count_between(0, synth_options::most_ids));
  app->add_option("--max-live", o.max_live, "blocks live at most (default 4096)")
      ->type_name("N")
      ->transform(count_between(1, synth_options::most_live));
  app->footer("Example: gpumem synth big.csv --events 20000000");
  runs_[app] = [this] { return run_synth(synth_); };
}

void command_line::define_help()
{
  auto* app = root_.add_subcommand("help", "this help, or a command's: gpumem help COMMAND");
  std::vector<std::string> names;
  for (auto const* sub : root_.get_subcommands([](CLI::App const*) { return true; })) {
    if (sub != app) { names.push_back(sub->get_name()); }
  }
  app->add_option("COMMAND", help_topic_, "the command to describe")
      ->type_name("")
      ->check(one_of("command", names));
  runs_[app] = [this] {
    return print_help(help_topic_.empty() ? root_ : *root_.get_subcommand(help_topic_));
  };
}

CLI::App& command_line::chosen()
{
  auto const parsed = root_.get_subcommands();
  return parsed.empty() ? root_ : *parsed.front();
}

CLI::App& command_line::failed()
{
  auto& app = chosen();
  if (&app != &root_) { return app; }
  for (auto* sub : root_.get_subcommands([](CLI::App const*) { return true; })) {
    if (sub->get_name() == first_word_) { return *sub; }
  }
  return root_;
}

int command_line::print_help(CLI::App const& app) const
{
  std::cout << app.get_formatter()->make_help(&app, command_name(app), CLI::AppFormatMode::Normal);
  return 0;
}

int command_line::run(std::vector<std::string> words)
{
  if (!words.empty()) { first_word_ = words.front(); }
  auto reversed = prepare_words(std::move(words));
  std::reverse(reversed.begin(), reversed.end());
  try {
    root_.parse(reversed);
  } catch (CLI::CallForHelp const&) {
    return print_help(chosen());
  } catch (CLI::CallForVersion const& e) {
    std::cout << e.what() << '\n';
    return 0;
  }
  auto& app = chosen();
  refuse_leftovers(app, app);
  refuse_leftovers(root_, app);
  if (&app != &root_) {
    for (auto const* opt : root_.get_options()) {
      if (opt->count() > 0) {
        throw usage_error{opt->get_name() + " goes after the command: " + command_name(app) +
                          " ... " + opt->get_name()};
      }
    }
  }
  return runs_.at(&app)();
}

}  // namespace

int main(int argc, char** argv)
{
  std::vector<std::string> words(argv + 1, argv + argc);
  command_line cli;
  try {
    return cli.run(std::move(words));
  } catch (usage_error const& e) {
    std::cerr << "gpumem: " << e.what() << '\n' << cli.hint() << '\n';
    return 2;
  } catch (CLI::ParseError const& e) {
    std::cerr << "gpumem: " << cli.message(e) << '\n' << cli.hint() << '\n';
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
