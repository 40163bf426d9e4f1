// gpumem/detail/one_stream_placement.hpp — the stream-ordered core's placement while one stream
// alone allocates (not API). Named only by the virtual-memory pool (docs/design.md, "vmm_pool",
// "Placement" and "One stream").
//
// The first stream to allocate becomes the solo stream. While it is the only stream that has
// allocated, its allocations look in the idle list (free memory of no stream) before its own list,
// and its frees go straight into the idle list, where they coalesce with all free memory: holes
// between live blocks are refilled best fit first, so a repeated workload keeps its layout, and no
// reclaim (device synchronization) is needed to join a free with the rest. Another stream's first
// allocation ends solo mode for good (a device synchronization, so the idle list is idle again);
// with several streams on several host threads each stream's own list comes first, as in
// per_stream_placement (the idle list's lock is shared by every thread, and taking it on every
// allocation stopped scaling). With several streams on one host thread (a training loop with a
// side stream for data or a weight average) nothing contends for that lock, and the first stream
// (the loop's compute stream) keeps solo mode's rules: its allocations take the idle list first
// and its frees go there (pending), so its blocks refill the holes between live ones and a
// repeated step keeps its layout. Every other stream takes its own list first, so that its
// recurring blocks (the next batch, the next average) reuse its last ones instead of taking those
// holes; where it does take from the idle list (its slow path, a growth for it) it waits for the
// first stream's queued work first (an event: no synchronization). The other streams' frees go to
// their own lists (their next allocations reuse them with no call), and the first stream's next
// allocation hands them over to the idle list, ordered after them by an event per stream: so all
// free memory coalesces in the idle list between the first stream's allocations, and a repeated
// step keeps its layout (no reclaim, no growth, no handle moved). The first allocation from
// another host thread settles them too and ends this for good: each stream's own list first, frees
// to their own lists. (A recorded three-stream training trace held 1.11x its live bytes with each
// stream's list first, 1.052x with the idle list first for every stream and frees to their own
// lists, 1.026x with the other streams' frees left in their lists until a reclaim, and its warm
// passes moved 116-255 handles each; 1.012x with the handover, and no warm pass grows.)
//
// State (besides the core's idle list):
//   solo_      the solo stream's state, set once by the first allocation (after solo mode, the
//              first stream)
//   over_      solo mode has ended; only goes false -> true (under the grow lock and the idle
//              list's lock, after the synchronization)
//   pending_   the idle list may hold memory the first stream's queued work still uses (written
//              under the idle list's lock)
//   thread_    the host thread of the first allocation; many_threads_: another thread has
//              allocated since solo mode ended (only goes false -> true, under the grow lock and
//              the idle list's lock, after the synchronization)
//   handover_  after solo mode, another stream has freed since the first stream last allocated:
//              the first stream's next allocation takes those frees into the idle list (the core's
//              hand_over); set by those frees, cleared by that allocation (on thread_)
//   pool_bytes_, armed_, emptied_, frees_, last_run_frees_  the pool's question "when is all
//              of my memory free again, and how much work came before?": a free into the idle
//              list that leaves pool_bytes_ free there is a wholly free moment; it notes the frees
//              since the last one and, when armed_, sets emptied_, which the pool's next
//              allocation clears (hints: the pool checks under its locks)
// Invariants: many_threads_ => !pending_;  !pending_ => every block in the idle list is idle for
// the device (check_invariants() checks the first; the second is what settle_idle() restores);
// pending_ => the first stream's queued work covers every idle block's last use (its own frees,
// and the frees handed over, after which it waits); only the first stream takes a block from the
// idle list without waiting while pending_.
//
// The core asks (State: its per-stream state, with mutex, list and identity):
//   1. idle_first(mine)         hot path: serve `mine` from the idle list first?
//   2. free_to_idle(mine, b)    a free on `mine`: taken into the idle list? (noexcept)
//   3. order_for(mine)          under the idle list's lock, when `mine`'s slow path took a block
//                               there: `mine` waits for the first stream's pending frees
//   4. idle_in_use(mine)        under both locks, for a growth on `mine`: may queued work still
//                               use idle blocks? (and orders `mine` after it)
//   5. settle_idle()            under the idle list's lock: make every idle block idle
//   6. take_handover()          hot path, after idle_first(mine) said yes: hand the other
//                               streams' frees over to the idle list first? (clears the request)
//   7. accept_handover()        under the idle list's lock, when the core has ordered the first
//                               stream after another stream's frees: may they join the idle list?
//   8. check_invariants(name)
// and the pool alone (through the core's placement()): set_pool_bytes, watch_for_empty /
// take_emptied and last_run_frees, when a free on the first stream left the whole pool free (the
// pool then may put its layout back: vmm_home_layout.hpp).
// Thread safety: as the core; see each member for the locks it needs.
#pragma once

#include <gpumem/detail/free_block.hpp>
#include <gpumem/detail/invariant.hpp>
#include <gpumem/detail/runtime.hpp>

#include <atomic>
#include <mutex>
#include <thread>

namespace gpumem::detail {

template <class State>
class one_stream_placement {
 public:
  /// `idle` is the core's idle list, `grow_mutex` its grow lock; both outlive this object.
  one_stream_placement(runtime& rt, State& idle, std::mutex& grow_mutex) noexcept
      : runtime_{&rt}, idle_{&idle}, grow_mutex_{&grow_mutex}
  {
  }
  ~one_stream_placement()
  {
    if (event_ != nullptr) { runtime_->event_destroy(event_); }
    if (order_event_ != nullptr) { runtime_->event_destroy(order_event_); }
  }
  one_stream_placement(one_stream_placement const&)            = delete;
  one_stream_placement& operator=(one_stream_placement const&) = delete;

  /// True while `mine` is the solo stream (the first allocation claims it); another stream's
  /// first allocation ends solo mode (may throw what the synchronization throws: solo mode goes
  /// on then). After solo mode: true for the first stream while one host thread allocates.
  bool idle_first(State& mine)
  {
    if (!over_.load(std::memory_order_acquire)) { return still_solo(mine); }
    return one_thread() && solo_.load(std::memory_order_relaxed) == &mine;
  }

  /// True while every allocation since solo mode ended came from the host thread that made the
  /// first one (one relaxed load and a thread-id compare; the first other thread ends it, after a
  /// synchronization: may throw what that throws, and the allocation fails).
  bool one_thread()
  {
    if (many_threads_.load(std::memory_order_relaxed)) { return false; }
    if (thread_.load(std::memory_order_relaxed) == std::this_thread::get_id()) { return true; }
    end_one_thread();
    return false;
  }

  /// A free on the first stream goes into the idle list and marks it pending, until another host
  /// thread allocates. False: another stream (its own list takes the block; after solo mode, the
  /// first stream's next allocation hands it over to the idle list), or several threads.
  bool free_to_idle(State& mine, free_block const& block) noexcept
  {
    if (solo_.load(std::memory_order_relaxed) != &mine) {
      ask_handover();
      return false;
    }
    if (many_threads_.load(std::memory_order_relaxed)) { return false; }
    std::lock_guard lock{idle_->mutex};
    if (many_threads_.load(std::memory_order_relaxed)) { return false; }  // ended meanwhile
    idle_->list.insert(block);
    pending_.store(true, std::memory_order_relaxed);
    ++frees_;
    if (idle_->list.free_bytes() == pool_bytes_.load(std::memory_order_relaxed)) [[unlikely]] {
      emptied_now();
    }
    return true;
  }

  /// The pool's bytes, as of its last growth or trim (set by the pool under its grow lock): a
  /// free into the idle list that leaves this much free there is a wholly free moment (never
  /// while it is 0, the pool's way to watch for none).
  void set_pool_bytes(std::size_t bytes) noexcept
  {
    pool_bytes_.store(bytes, std::memory_order_relaxed);
  }
  /// The pool asks to hear of the next wholly free moment: take_emptied() then says so once. Any
  /// thread; a stale or racing answer is only a hint (the pool checks under its locks).
  void watch_for_empty() noexcept { armed_.store(true, std::memory_order_relaxed); }
  /// The frees into the idle list between the last two wholly free moments (how much work the
  /// last run between them did).
  [[nodiscard]] std::size_t last_run_frees() const noexcept
  {
    return last_run_frees_.load(std::memory_order_relaxed);
  }
  /// Hot path: true once after such a free (one relaxed load when there was none).
  bool take_emptied() noexcept
  {
    if (!emptied_.load(std::memory_order_relaxed)) [[likely]] { return false; }
    emptied_.store(false, std::memory_order_relaxed);
    return true;
  }

  /// Hot path, for the first stream once idle_first() said yes: true when another stream has freed
  /// since the first stream's last allocation and this is the one host thread (the core then hands
  /// those frees over to the idle list); clears the request. One relaxed load when there is none.
  bool take_handover() noexcept
  {
    if (!handover_.load(std::memory_order_relaxed)) [[likely]] { return false; }
    if (thread_.load(std::memory_order_relaxed) != std::this_thread::get_id()) { return false; }
    handover_.store(false, std::memory_order_relaxed);
    return true;
  }

  /// Under the idle list's lock, when the core has made the first stream wait for another
  /// stream's frees (an event recorded on that stream after them): true when they may join the
  /// idle list, now pending (the first stream's queued work covers them); false once several
  /// host threads allocate (they stay in their stream's list).
  bool accept_handover() noexcept
  {
    if (many_threads_.load(std::memory_order_relaxed)) { return false; }
    pending_.store(true, std::memory_order_relaxed);
    return true;
  }

  /// Under the idle list's lock, when `mine` took a block from it outside the hot path: while the
  /// first stream's frees are pending and `mine` is another stream, `mine` waits for the first
  /// stream's queued work (an event recorded on it now: every pending free was made before;
  /// two driver calls), or, where that event cannot be recorded from this thread, the device is
  /// synchronized. Throws what those calls throw.
  void order_for(State& mine)
  {
    if (!pending_.load(std::memory_order_relaxed)) { return; }
    auto* const first = solo_.load(std::memory_order_relaxed);
    if (first == &mine) { return; }
    if (!first->identity.recordable_here()) {
      settle_idle();
      return;
    }
    if (order_event_ == nullptr) { order_event_ = runtime_->event_create(); }
    runtime_->event_record(order_event_, first->identity.stream);
    runtime_->stream_wait_event(mine.identity.stream, order_event_);
  }

  /// Under the grow lock and the idle list's lock, for a growth on `mine`: true when the first
  /// stream's frees are pending and it still has work queued (the growth then takes new memory
  /// only, and moves nothing; another stream than the first waits for that work, as the memory
  /// it is handed may join pending frees).
  bool idle_in_use(State& mine)
  {
    if (!pending_.load(std::memory_order_relaxed) || !stream_busy()) { return false; }
    if (solo_.load(std::memory_order_relaxed) != &mine) {
      runtime_->stream_wait_event(mine.identity.stream, event_);  // stream_busy() recorded it
    }
    return true;
  }

  /// Under the idle list's lock: synchronizes the device when first-stream frees are pending.
  /// Throws what the synchronization throws (pending_ kept).
  void settle_idle()
  {
    if (!pending_.load(std::memory_order_relaxed)) { return; }
    runtime_->device_synchronize();
    pending_.store(false, std::memory_order_relaxed);
  }

  void check_invariants(char const* resource) const
  {
    GPUMEM_INVARIANT(!(many_threads_.load() && pending_.load()), resource,
                     "first-stream frees pending after a second host thread allocated");
  }

 private:
  /// A free on another stream than the first, after solo mode and while one host thread
  /// allocates: the first stream's next allocation hands the free blocks of the other streams
  /// over to the idle list (a relaxed load, and a store when no handover is asked yet).
  void ask_handover() noexcept
  {
    if (!over_.load(std::memory_order_relaxed) || many_threads_.load(std::memory_order_relaxed) ||
        handover_.load(std::memory_order_relaxed)) {
      return;
    }
    handover_.store(true, std::memory_order_relaxed);
  }

  /// Under the idle list's lock, at a wholly free moment.
  void emptied_now() noexcept
  {
    last_run_frees_.store(frees_, std::memory_order_relaxed);
    frees_ = 0;
    if (armed_.load(std::memory_order_relaxed)) {
      armed_.store(false, std::memory_order_relaxed);
      emptied_.store(true, std::memory_order_relaxed);
    }
  }

  bool still_solo(State& mine)
  {
    // A plain load first: the solo stream's own allocations (every one, while solo) make no
    // read-modify-write on the shared flag; only the first allocation ever claims it.
    State* expected = solo_.load(std::memory_order_acquire);
    if (expected == &mine) { return true; }
    if (expected == nullptr && solo_.compare_exchange_strong(expected, &mine)) {
      thread_.store(std::this_thread::get_id(), std::memory_order_relaxed);
      return true;
    }
    if (expected == &mine) { return true; }
    end();
    return false;
  }

  /// Another host thread allocates: the first stream's frees stop going to the idle list, and
  /// those pending there are settled (the other threads' streams may take them).
  [[gnu::cold, gnu::noinline]] void end_one_thread()
  {
    std::lock_guard lock{*grow_mutex_};
    std::lock_guard ilock{idle_->mutex};
    if (many_threads_.load(std::memory_order_relaxed)) { return; }
    settle_idle();  // throws (e.g. during a graph capture): one-thread mode goes on
    many_threads_.store(true, std::memory_order_relaxed);
  }

  [[gnu::cold, gnu::noinline]] void end()
  {
    std::lock_guard lock{*grow_mutex_};
    std::lock_guard ilock{idle_->mutex};
    if (over_.load(std::memory_order_relaxed)) { return; }
    settle_idle();  // throws (e.g. during a graph capture): solo mode goes on
    over_.store(true, std::memory_order_release);
  }

  /// Under the grow lock: true when the solo stream still has work queued (an event recorded on
  /// it now has not completed); false when it is done or the question cannot be asked.
  bool stream_busy() noexcept
  {
    auto* const solo = solo_.load(std::memory_order_acquire);
    if (solo == nullptr) { return false; }
    try {
      if (event_ == nullptr) { event_ = runtime_->event_create(); }
      runtime_->event_record(event_, solo->identity.stream);
      return !runtime_->event_query(event_);
    } catch (...) {  // e.g. during a graph capture: the synchronization that follows reports it
      return false;
    }
  }

  runtime* runtime_;
  State* idle_;
  std::mutex* grow_mutex_;
  std::atomic<State*> solo_{};
  std::atomic<bool> over_{false};
  std::atomic<bool> pending_{false};  // written under idle_->mutex
  std::atomic<std::thread::id> thread_{};
  std::atomic<bool> many_threads_{false};
  std::atomic<bool> handover_{false};          // cleared on thread_ only
  std::atomic<std::size_t> pool_bytes_{};      // set_pool_bytes'
  std::atomic<bool> armed_{false};             // watch_for_empty asked for the next such moment
  std::atomic<bool> emptied_{false};           // it came (take_emptied clears it)
  std::size_t frees_{};                        // frees into the idle list since the last one;
                                               // guarded by idle_->mutex
  std::atomic<std::size_t> last_run_frees_{};  // frees_ at the last wholly free moment
  cudaEvent_t event_{};                        // stream_busy()'s question; guarded by the grow lock
  cudaEvent_t order_event_{};                  // order_for()'s; guarded by the idle list's lock
};

}  // namespace gpumem::detail
