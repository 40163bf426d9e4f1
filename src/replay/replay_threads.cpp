// --threads: each trace thread replays on its own host thread; a turn counter keeps the trace's
// global order (event i runs only after event i-1, whichever thread ran it).
//
// Cost per event does not depend on the number of trace threads: the main thread splits each chunk
// into one list of event indexes per worker, and a thread that finishes an event wakes only the
// owner of the next one (each thread sleeps on a bell of its own: an atomic counter it waits on).
// Waking the workers of a chunk costs one ring per worker that has events in it.
#include "replayer.hpp"

#include <gpumem/detail/format.hpp>

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <stdexcept>
#include <system_error>
#include <thread>

namespace gpumem::trace {
namespace {

/// A thread's wake-up: ring() after changing what it waits for; wait_until() sleeps until `ready`.
struct alignas(64) bell {
  std::atomic<std::uint32_t> rings{0};

  void ring() noexcept
  {
    rings.fetch_add(1, std::memory_order_release);
    rings.notify_one();
  }
  template <class Ready>
  void wait_until(Ready&& ready) noexcept
  {
    for (;;) {
      auto const seen = rings.load(std::memory_order_acquire);
      if (ready()) { return; }
      rings.wait(seen, std::memory_order_acquire);
    }
  }
};

}  // namespace

/// What the threads of a threaded replay share. The main thread fills `mine` and `work_gen` of
/// the workers with events in a chunk, then publishes the chunk by bumping `generation`; it touches
/// them again only after each of those workers has counted itself in `finished`.
struct replayer::threaded_state {
  threaded_state(std::size_t chunk_events, std::size_t workers)
      : chunk(chunk_events), mine(workers), work_gen(workers), bells(workers + 1)
  {
  }
  std::vector<compact_event> chunk;
  std::size_t n{};                                 ///< events in chunk
  std::vector<std::vector<std::uint32_t>> mine;    ///< per worker: its events' indexes in chunk
  std::vector<std::atomic<std::size_t>> work_gen;  ///< per worker: the generation `mine` is for
  std::vector<std::size_t> active;                 ///< workers with events in the current chunk
  std::vector<bell> bells;                         ///< per worker, then the main thread's
  std::atomic<std::size_t> turn{0};                ///< index of the next event to apply
  std::atomic<std::size_t> generation{0};          ///< bumped when a chunk (or the stop) is out
  std::atomic<std::size_t> finished{0};            ///< active workers done with the chunk
  std::atomic<bool> stop{false};
  std::exception_ptr error;  ///< an unexpected exception of a worker (set before stop)

  bell& main_bell() noexcept { return bells.back(); }
  /// After event i ran (or the chunk was abandoned): wakes whoever runs event i + 1.
  void pass_turn(std::size_t next) noexcept
  {
    turn.store(next, std::memory_order_release);
    (next < n ? bells[chunk[next].thread] : main_bell()).ring();
  }
  void stop_all() noexcept
  {
    stop.store(true, std::memory_order_release);
    for (auto& b : bells) { b.ring(); }
  }
};

bool replayer::run_thread_chunk(threaded_state& st, std::uint16_t me)
{
  auto& bell = st.bells[me];
  for (auto const i : st.mine[me]) {
    bell.wait_until([&] {
      return st.turn.load(std::memory_order_acquire) == i ||
             st.stop.load(std::memory_order_acquire);
    });
    if (st.stop.load(std::memory_order_acquire)) { return false; }
    try {
      apply(st.chunk[i]);
    } catch (stop_replay const&) {
      st.stop_all();
      return false;
    } catch (...) {
      st.error = std::current_exception();
      st.stop_all();
      return false;
    }
    st.pass_turn(i + 1);
  }
  return true;
}

void replayer::thread_main(threaded_state& st, std::uint16_t me)
{
  for (std::size_t seen = 0;;) {
    st.bells[me].wait_until([&] {
      return st.generation.load(std::memory_order_acquire) != seen ||
             st.stop.load(std::memory_order_acquire);
    });
    if (st.stop.load(std::memory_order_acquire)) { return; }
    seen = st.generation.load(std::memory_order_acquire);
    if (st.work_gen[me].load(std::memory_order_acquire) != seen) { continue; }  // no events here
    run_thread_chunk(st, me);
    st.finished.fetch_add(1, std::memory_order_acq_rel);
    st.main_bell().ring();
  }
}

/// Splits the chunk among the workers and publishes it as generation `g`.
void publish_chunk(auto& st, std::size_t g)
{
  for (auto const w : st.active) { st.mine[w].clear(); }
  st.active.clear();
  for (std::size_t i = 0; i < st.n; ++i) {
    auto& list = st.mine[st.chunk[i].thread];
    if (list.empty()) { st.active.push_back(st.chunk[i].thread); }
    list.push_back(static_cast<std::uint32_t>(i));
  }
  for (auto const w : st.active) { st.work_gen[w].store(g, std::memory_order_release); }
  st.turn.store(0, std::memory_order_release);
  st.finished.store(0, std::memory_order_release);
  st.generation.store(g, std::memory_order_release);
  for (auto const w : st.active) { st.bells[w].ring(); }
}

replay_result replayer::run_threads(trace_profile const& profile)
{
  start();
  map_streams(profile.streams);
  auto const workers = profile.threads.size();
  threaded_state st{std::max<std::size_t>(options_.chunk_events, 1), workers};
  std::vector<std::thread> pool;
  pool.reserve(workers);
  auto join_all = [&] {
    st.stop_all();
    for (auto& w : pool) { w.join(); }
  };
  for (std::size_t t = 0; t < workers; ++t) {
    try {
      pool.emplace_back([this, &st, t] { thread_main(st, static_cast<std::uint16_t>(t)); });
    } catch (std::system_error const& e) {
      join_all();
      throw std::runtime_error{detail::format(
          "threaded replay of ", profile.path, ": the system refused thread ", t + 1, " of ",
          workers, " (", e.what(), "); replay without --threads, or allow more threads")};
    }
  }
  auto& trace = *profile.compact;
  trace.rewind();
  std::uint64_t done = 0;
  for (std::size_t g = 1; !st.stop.load() && (st.n = trace.read(st.chunk)) != 0; ++g) {
    publish_chunk(st, g);
    st.main_bell().wait_until([&] {  // on a stop, join_all() waits for the workers
      return (st.turn.load(std::memory_order_acquire) >= st.n &&
              st.finished.load(std::memory_order_acquire) == st.active.size()) ||
             st.stop.load(std::memory_order_acquire);
    });
    done += st.n;
    if (options_.progress.report) { options_.progress.report(done, profile.events); }
  }
  join_all();
  if (st.error) { std::rethrow_exception(st.error); }
  return finish();
}

}  // namespace gpumem::trace
