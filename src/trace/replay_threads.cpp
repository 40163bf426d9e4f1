// --threads: each trace thread replays on its own host thread; a turn counter keeps the trace's
// global order (event i runs only after event i-1, whichever thread ran it).
#include "replayer.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

namespace gpumem::trace {

/// What the threads of a threaded replay share: the current chunk and the hand-over counters.
/// A chunk is replaced only after every worker has finished scanning it (`finished`).
struct replayer::threaded_state {
  explicit threaded_state(std::size_t chunk_events) : chunk(chunk_events) {}
  std::vector<compact_event> chunk;
  std::size_t n{};                         ///< events in chunk (written before `generation`)
  std::atomic<std::size_t> turn{0};        ///< index of the next event to apply
  std::atomic<std::size_t> generation{0};  ///< bumped when a chunk (or the stop) is published
  std::atomic<std::size_t> finished{0};    ///< workers done with the current chunk
  std::atomic<bool> stop{false};
};

bool replayer::run_thread_chunk(threaded_state& st, std::uint16_t me)
{
  for (std::size_t i = 0; i < st.n; ++i) {
    if (st.chunk[i].thread != me) { continue; }
    while (st.turn.load(std::memory_order_acquire) != i) {
      if (st.stop.load(std::memory_order_acquire)) { return false; }
      std::this_thread::yield();
    }
    try {
      apply(st.chunk[i]);
    } catch (stop_replay const&) {
      st.stop.store(true, std::memory_order_release);
      st.turn.store(st.n, std::memory_order_release);
      return false;
    }
    st.turn.store(i + 1, std::memory_order_release);
  }
  return true;
}

void replayer::thread_main(threaded_state& st, std::uint16_t me)
{
  for (std::size_t seen = 0;;) {
    std::size_t g = 0;
    while ((g = st.generation.load(std::memory_order_acquire)) == seen) {
      std::this_thread::yield();
    }
    seen          = g;
    bool const ok = !st.stop.load(std::memory_order_acquire) && run_thread_chunk(st, me);
    st.finished.fetch_add(1, std::memory_order_acq_rel);
    if (!ok) { return; }
  }
}

replay_result replayer::run_threads(trace_profile const& profile)
{
  start();
  map_streams(profile.streams);
  threaded_state st{std::max<std::size_t>(options_.chunk_events, 1)};
  std::vector<std::thread> workers;
  for (std::size_t t = 0; t < profile.threads.size(); ++t) {
    workers.emplace_back([this, &st, t] { thread_main(st, static_cast<std::uint16_t>(t)); });
  }
  auto& trace = *profile.compact;
  trace.rewind();
  std::uint64_t done = 0;
  while (!st.stop.load() && (st.n = trace.read(st.chunk)) != 0) {
    st.turn.store(0, std::memory_order_release);
    st.finished.store(0, std::memory_order_release);
    st.generation.fetch_add(1, std::memory_order_acq_rel);
    while (st.turn.load(std::memory_order_acquire) < st.n ||
           st.finished.load(std::memory_order_acquire) < workers.size()) {
      std::this_thread::yield();
    }
    done += st.n;
    if (options_.progress.report) { options_.progress.report(done, profile.events); }
  }
  st.stop.store(true, std::memory_order_release);
  st.generation.fetch_add(1, std::memory_order_acq_rel);
  for (auto& w : workers) { w.join(); }
  return finish();
}

}  // namespace gpumem::trace
