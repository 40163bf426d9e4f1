// tools/gpumem/commands.hpp — the subcommands other than replay (whose options live in
// replay_command.hpp). main.cpp parses arguments into these and calls them; each returns the
// process exit status.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gpumem::tool {

struct bench_options {
  std::vector<std::string> resources;  ///< empty: every default-run stack (+ peers on a GPU)
  std::vector<std::string> workloads;  ///< empty: all of pair, random_small, random_large,
                                       ///< threads, replay
  std::vector<std::string> traces;     ///< for `replay`; empty: the bundled traces
  bool simulate{};
  std::size_t capacity_bytes{std::size_t{80} << 30};
  bool smoke{};  ///< a few iterations of everything (CI)
  bool json{};
  bool progress{true};
  std::string profile;  ///< where to write a sampling profile of the timed loops; empty: none
};
int run_bench(bench_options const& options);

/// Devices, memory, pool support, handle types, VMM granularity, versions.
int run_info();

/// Runs snapshot_to_csv.py (python3) on a PyTorch memory snapshot.
int run_convert(std::string const& snapshot, std::string const& csv, std::string const& device,
                std::string const& python);

struct synth_options {
  static constexpr std::uint64_t most_events = std::uint64_t{1} << 40;  ///< ~50 TB of text
  static constexpr unsigned most_ids         = 65535;  ///< threads / streams a trace may name
  static constexpr std::size_t most_live     = std::size_t{1} << 24;
  std::string out;
  std::uint64_t events{10'000'000};
  std::uint64_t seed{1};
  unsigned threads{1};
  unsigned streams{1};
  std::size_t max_live{4096};  ///< live blocks at most
};
/// Writes a synthetic trace (log-uniform sizes 256 B .. 64 MiB, random frees).
int run_synth(synth_options const& options);

}  // namespace gpumem::tool
