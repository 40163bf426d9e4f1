// `gpumem synth`: a synthetic trace, for measuring the replayer on traces of any length.
#include "checked_output.hpp"
#include "commands.hpp"

#include <gpumem/trace/trace_writer.hpp>

#include <cmath>
#include <iostream>
#include <random>

namespace gpumem::tool {
namespace {

struct live_entry {
  std::uint64_t ptr;
  std::uint64_t size;
  std::uint64_t thread;
};

/// Writes the header and o.events events to `path`; throws trace_error when a write fails.
void write_trace(std::string const& path, synth_options const& o)
{
  trace::trace_writer w{path};
  std::mt19937_64 rng{o.seed};
  std::uniform_real_distribution<double> log_size{std::log(256.0), std::log(64.0 * 1024 * 1024)};
  std::vector<live_entry> live;
  std::uint64_t next_ptr = 0x7f0000000000ULL;
  for (std::uint64_t i = 0; i < o.events; ++i) {
    bool const alloc = live.empty() || (live.size() < o.max_live && (rng() & 1) == 0);
    trace::event e;
    e.time = i;
    if (alloc) {
      e.act     = trace::action::allocate;
      e.size    = static_cast<std::uint64_t>(std::exp(log_size(rng)));
      e.pointer = next_ptr;
      e.thread  = rng() % o.threads;
      next_ptr += (e.size + 511) & ~std::uint64_t{255};
      live.push_back({e.pointer, e.size, e.thread});
    } else {
      auto const k = rng() % live.size();
      e.act        = trace::action::free;
      e.pointer    = live[k].ptr;
      e.size       = live[k].size;
      e.thread     = live[k].thread;
      live[k]      = live.back();
      live.pop_back();
    }
    e.stream = o.streams <= 1 ? 0 : 1 + e.thread % o.streams;
    w.write(e);
  }
  w.close();
}

}  // namespace

int run_synth(synth_options const& o)
{
  checked_output out{o.out, {}};
  out.close_stream();  // the trace writer writes the temporary
  try {
    write_trace(out.writing_path(), o);
  } catch (trace::trace_error const& e) {
    throw output_error{"cannot write " + o.out + " (" + e.what() + "); nothing was left behind"};
  }
  out.commit();
  std::cerr << "wrote " << o.events << " events to " << o.out << "\n";  // stdout may be the trace
  return 0;
}

}  // namespace gpumem::tool
