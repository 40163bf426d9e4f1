// --threads: each trace thread replays on its own host thread; a turn counter keeps the trace's
// global order (event i runs only after event i-1, whichever thread ran it).
#include "replayer.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

namespace gpumem::trace {

void replayer::run_threads()
{
  auto const& ids = profile_.threads;
  std::vector<compact_event> chunk(options_.chunk_events);
  std::atomic<std::size_t> turn{0};
  std::atomic<std::size_t> generation{0};
  std::atomic<bool> stop{false};
  std::size_t n = 0;

  std::atomic<std::size_t> finished{0};  // workers done scanning the current chunk

  // One chunk for thread `me`: false when the replay stopped.
  auto run_chunk = [&](std::uint16_t me) {
    for (std::size_t i = 0; i < n; ++i) {
      if (chunk[i].thread != me) { continue; }
      while (turn.load(std::memory_order_acquire) != i) {
        if (stop.load(std::memory_order_acquire)) { return false; }
        std::this_thread::yield();
      }
      try {
        apply(chunk[i]);
      } catch (stop_replay const&) {
        stop.store(true, std::memory_order_release);
        turn.store(n, std::memory_order_release);
        return false;
      }
      turn.store(i + 1, std::memory_order_release);
    }
    return true;
  };
  auto work = [&](std::uint16_t me) {
    for (std::size_t seen = 0;;) {
      std::size_t g = 0;
      while ((g = generation.load(std::memory_order_acquire)) == seen) {
        std::this_thread::yield();
      }
      seen          = g;
      bool const ok = !stop.load(std::memory_order_acquire) && run_chunk(me);
      finished.fetch_add(1, std::memory_order_acq_rel);
      if (!ok) { return; }
    }
  };

  std::vector<std::thread> workers;
  for (std::size_t t = 0; t < ids.size(); ++t) {
    workers.emplace_back(work, static_cast<std::uint16_t>(t));
  }
  auto& trace = *profile_.compact;
  trace.rewind();
  std::uint64_t done = 0;
  while (!stop.load() && (n = trace.read(chunk)) != 0) {
    auto const t0 = std::chrono::steady_clock::now();
    turn.store(0, std::memory_order_release);
    finished.store(0, std::memory_order_release);
    generation.fetch_add(1, std::memory_order_acq_rel);
    while (turn.load(std::memory_order_acquire) < n ||
           finished.load(std::memory_order_acquire) < workers.size()) {
      std::this_thread::yield();
    }
    result_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    done += n;
    if (options_.progress.report) { options_.progress.report(done, profile_.events); }
  }
  stop.store(true, std::memory_order_release);
  generation.fetch_add(1, std::memory_order_acq_rel);
  for (auto& w : workers) { w.join(); }
}

}  // namespace gpumem::trace
