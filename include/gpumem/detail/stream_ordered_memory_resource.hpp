// gpumem/detail/stream_ordered_memory_resource.hpp — the stream-ordered core shared by the
// suballocators (pool, fixed_size): free memory kept per stream, reused at once on the stream that
// freed it, handed to another stream only once that stream is ordered after the free (not API).
//
// State:
//   streams_   per stream: a mutex, a free list (FreeList), the stream's identity, a lazily created
//              event. Found through a thread-local cache (stream_registry), no global lock.
//   unowned_   free memory no stream has touched since it came from upstream (or since a device
//              synchronization): any stream takes it without waiting.
//   table_     handed-out blocks by pointer (true size and chunk; detects double / foreign frees).
//   chunks_    upstream allocations; pool_bytes_ their total.
//
// allocate(size, S), in this order (docs/design.md, "Suballocators"):
//   1. hit path: best fit in S's own list — S's mutex only, no runtime call (a Derived with
//      idle_first looks in unowned_ first while S is the only stream that allocated: the
//      virtual-memory pool's one-stream mode, see serves_idle_first() and free_solo());
//   2. unowned_ (its mutex);
//   3. steal from another stream A's list: record A's event now (after the free, so it covers it),
//      make S wait on it, take the block (from a same-size list, half of A's blocks with it, and
//      only when A holds at least min_donor_blocks). Skipped for another thread's per-thread
//      default stream (an event recorded on cudaStreamPerThread from this thread would land on
//      the wrong stream);
//   3b. same-size lists only, under grow_mutex_: unowned_ again, then grow (reclaim only when the
//      upstream is out of memory): see grow_before_reclaim();
//   4. under grow_mutex_: reclaim — detach every stream's list, synchronize the device (all work
//      enqueued before the frees is done), merge everything into unowned_ (coalescing across
//      streams), retry;
//   5. the growth hook (growth_hook.hpp), when one is set and gives memory back: S's list and
//      unowned_, then reclaim again, retry;
//   6. grow: a new upstream chunk (Derived's growth policy), taken from directly.
// deallocate(p, n, S): look p up in table_ (unknown: reported, ignored), insert into S's list
// (coalescing; in one-stream mode into unowned_). No runtime call.
//
// Invariants (check_invariants(), throws logic_error naming the broken equality):
//   pool_bytes_ == sum of chunk sizes
//   free bytes (all lists) + handed-out bytes (table_) == pool_bytes_
//   every block lies inside its chunk; no two blocks (free or handed out) overlap
//   each list's own invariants
//
// Derived (CRTP) provides, privately with this class as friend:
//   static constexpr char const* resource_name;
//   std::size_t allocation_size(std::size_t bytes) const;          // block size; throws when too
//   big bool size_matches(std::size_t bytes, std::size_t block) const noexcept; free_block
//   allocate_chunk(std::size_t size, cuda_stream_view);  // growth policy; may throw void
//   deallocate_chunk(free_block chunk) noexcept;
// and calls release_all() in its destructor.
// A Derived that backs one address range on demand (the virtual-memory pool) instead provides
//   free_block grow_in_place(FreeList& idle, std::size_t size, bool may_move);  // backs more of
//        its range and takes a block of `size` from `idle`; may_move: every idle block is idle
//        for the device, so free memory may be unmapped and moved; false: new memory only (the
//        one stream's work may still use idle blocks in place); out_of_memory
//   std::size_t backed_bytes() const;                        // what pool_size() reports
//   void check_backing(std::vector<free_block> const& blocks) const;  // its own invariants
// registers its range with register_range() (blocks of it coalesce across growth steps), and
// reaches the idle memory at a synchronization point through with_idle().
//
// Thread safety: allocate/deallocate from any thread. check_invariants() needs no concurrent
// allocate/deallocate. Lock order: grow_mutex_ < registry < a stream's mutex < table_ shards.
#pragma once

#include <gpumem/detail/allocation_table.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/free_block.hpp>
#include <gpumem/detail/growth_hook.hpp>
#include <gpumem/detail/invariant_checks.hpp>
#include <gpumem/detail/runtime.hpp>
#include <gpumem/detail/spin_mutex.hpp>
#include <gpumem/detail/stream_registry.hpp>
#include <gpumem/mr/capabilities.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <atomic>
#include <concepts>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

namespace gpumem::detail {

/// Writes a bad-deallocation diagnostic to stderr (the first few per resource; see design.md).
void report_bad_deallocation(char const* resource, void const* ptr, std::size_t bytes,
                             std::string const& why, std::uint64_t count) noexcept;
/// "pool size P, free F in N blocks, largest free block L (fragmentation X%)".
[[nodiscard]] std::string describe_free(std::size_t pool_bytes, free_stats const& stats);
/// Throws logic_error "<resource>: invariant broken: <what>" when !cond; `what` is only built then.
/// An internal logic error: the message keeps the place in the sources (site_message).
#define GPUMEM_INVARIANT(cond, resource, what)                                                    \
  do {                                                                                            \
    if (!(cond)) [[unlikely]] {                                                                   \
      throw ::gpumem::logic_error{::gpumem::detail::site_message(                                 \
          __FILE__, __LINE__, ::gpumem::detail::format(resource, ": invariant broken: ", what))}; \
    }                                                                                             \
  } while (0)
/// Checks that blocks (any order) lie within their chunks and do not overlap.
void check_blocks(char const* resource, std::vector<free_block> blocks,
                  std::vector<free_block> const& chunks);

template <class Derived, class FreeList>
class stream_ordered_memory_resource : public mr::device_memory_resource,
                                       public mr::pool_size_source,
                                       public growth_hook_target {
 public:
  stream_ordered_memory_resource(stream_ordered_memory_resource const&)            = delete;
  stream_ordered_memory_resource& operator=(stream_ordered_memory_resource const&) = delete;

  /// Total bytes taken from upstream (free and handed out).
  [[nodiscard]] std::size_t pool_size() const noexcept override { return pool_bytes_.load(); }
  /// The runtime used for events and synchronization.
  [[nodiscard]] runtime& get_runtime() const noexcept { return *runtime_; }
  /// Deallocations of pointers that were not handed out (double or foreign frees), so far.
  [[nodiscard]] std::uint64_t bad_deallocations() const noexcept { return bad_frees_.load(); }
  /// The size of the block handed out at `ptr`, or nothing when this resource did not hand it
  /// out (lets a resource over several of these find a pointer's owner).
  [[nodiscard]] std::optional<std::size_t> handed_out_size(void const* ptr) const noexcept
  {
    return table_.size_of(ptr);
  }
  /// Free memory over all lists (takes every list's lock in turn).
  [[nodiscard]] free_stats get_free_stats() const;
  void check_invariants() const;
  [[nodiscard]] bool lean() const noexcept override { return backs_in_place(); }
  void add_before_growth(hook fn, void* context) override
  {
    std::lock_guard lock{grow_mutex_};
    growth_hooks_.push_back({fn, context});
  }
  void remove_before_growth(void* context) noexcept override
  {
    std::lock_guard lock{grow_mutex_};
    std::erase_if(growth_hooks_, [context](auto const& h) { return h.context == context; });
  }

 protected:
  stream_ordered_memory_resource(runtime& rt, FreeList prototype)
      : runtime_{&rt},
        prototype_{std::move(prototype)},
        unowned_{{}, prototype_},
        streams_{
            [this](stream_identity id) { return std::make_unique<stream_state>(id, prototype_); }}
  {
  }
  ~stream_ordered_memory_resource() override;

  /// Registers an upstream chunk (e.g. the initial pool) as free memory of no stream.
  void adopt_chunk(free_block chunk);
  /// Registers an address range whose memory Derived backs on demand (grow_in_place); nothing
  /// becomes free. Blocks name it as their chunk.
  void register_range(free_block range);
  /// Under the grow lock: moves every stream's free memory to the idle list behind a device
  /// synchronization (as before a growth), then calls f(idle list) and returns its result.
  template <class F>
  decltype(auto) with_idle(F&& f);
  /// Calls f() under the grow lock (state that only slow paths change can be read there).
  template <class F>
  void under_grow_lock(F&& f)
  {
    std::lock_guard lock{grow_mutex_};
    f();
  }
  /// Returns every chunk upstream and forgets all blocks. Derived destructors call it.
  void release_all() noexcept;
  /// describe_free() of the current state.
  [[nodiscard]] std::string describe_state() const
  {
    return describe_free(pool_size(), get_free_stats());
  }

 private:
  struct alignas(64) stream_state {  // own cache lines: no false sharing between streams
    stream_state(stream_identity id, FreeList const& proto) : list{proto}, identity{id} {}
    spin_mutex mutex;  // held for one free-list operation on the hot path
    FreeList list;
    stream_identity identity;
    cudaEvent_t event{};  // created on first steal from this stream; guarded by mutex
    // A hint for other streams' slow paths: false means the list is empty (set by deallocate,
    // cleared by a slow path that finds the list empty), so they skip it without locking.
    std::atomic<bool> maybe_free{false};
  };

  Derived& derived() noexcept { return static_cast<Derived&>(*this); }
  Derived const& derived() const noexcept { return static_cast<Derived const&>(*this); }

  // Protected: a Derived that refuses allocations in some state (the virtual-memory pool while
  // paused) checks first and passes the rest here.
 protected:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    [[maybe_unused]] auto const gate = gate_.enter();
    auto const size                  = derived().allocation_size(bytes);
    auto& mine                       = streams_.get(stream.value());
    auto block                       = take_first(mine, size);
    if (!block.valid()) {
      block = allocate_slow(mine, size, stream);
      record(mine, block);
      check_after_slow_path("allocate_slow", [this] { check_invariants(); });
      return block.ptr;
    }
    record(mine, block);
    return block.ptr;
  }

  // Protected: a Derived with memory of its own outside the lists (the virtual-memory pool's
  // single-handle allocations) takes its pointers first and passes the rest here.
 protected:
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    [[maybe_unused]] auto const gate = gate_.enter();
    auto const block                 = table_.erase(ptr);
    if (!block) {
      report_bad(ptr, bytes, "not handed out by this resource (double free or foreign pointer)");
      return;
    }
    if (!derived().size_matches(bytes, block->size)) {
      report_bad(ptr, bytes,
                 format("size differs from the allocation (block of ", block->size,
                        " bytes); the block is freed"));
    }
    auto& mine = streams_.get(stream.value());
    if constexpr (serves_idle_first()) {
      if (free_solo(mine, *block)) { return; }
    }
    std::lock_guard lock{mine.mutex};
    mine.list.insert(*block);
    mine.maybe_free.store(true, std::memory_order_relaxed);
  }
  /// Reports a bad deallocation and counts it in bad_deallocations().
  void report_bad(void const* ptr, std::size_t bytes, std::string const& why) noexcept;

 private:
  /// The hit path's first fit: the stream's own list, or for a Derived that asks for it
  /// (idle_first) while one stream alone uses it, the idle list first (see serves_idle_first()).
  /// With several streams, each stream's own list comes first again: the idle list's lock is
  /// shared by every thread, and taking it on every allocation stopped scaling with threads
  /// (vmm_pool, 16 threads on the H100: 9.3 -> 2.1 M ops/s).
  free_block take_first(stream_state& mine, std::size_t size)
  {
    if constexpr (serves_idle_first()) {
      if (!solo_over_.load(std::memory_order_acquire) && still_solo(mine)) {
        if (auto b = take_unowned(size); b.valid()) { return b; }
      }
    }
    return take_from(mine, size);  // built in place: no copy of the block
  }
  static free_block take_from(stream_state& s, std::size_t size)
  {
    std::lock_guard lock{s.mutex};
    return s.list.take(size);
  }
  void record(stream_state& mine, free_block const& block);
  // -- one stream alone (idle_first resources; docs/design.md, "vmm_pool", "One stream") --------
  /// The first stream to allocate becomes the solo stream; another stream's first allocation ends
  /// solo mode (end_solo: a device synchronization, so the idle list is idle again). Returns
  /// whether `mine` is the solo stream of a solo mode still going on.
  bool still_solo(stream_state& mine);
  void end_solo();
  /// A free on the solo stream goes straight into the idle list (coalescing with all free memory)
  /// and marks it as holding memory the device may still use (solo_pending_). False: not solo.
  bool free_solo(stream_state& mine, free_block const& block) noexcept
  {
    if (solo_over_.load(std::memory_order_acquire) ||
        solo_.load(std::memory_order_relaxed) != &mine) {
      return false;
    }
    std::lock_guard lock{unowned_.mutex};
    if (solo_over_.load(std::memory_order_relaxed)) { return false; }  // ended meanwhile
    unowned_.list.insert(block);
    solo_pending_.store(true, std::memory_order_relaxed);
    return true;
  }
  /// Under unowned_.mutex: makes every block of the idle list idle for the device (synchronizes
  /// when solo frees are pending). Throws what the synchronization throws (flag kept).
  void settle_solo_frees();
  /// Under grow_mutex_: true when the solo stream still has work queued (an event recorded on it
  /// now has not completed); false when it is done or the question cannot be asked.
  bool solo_stream_busy() noexcept;
  [[gnu::cold, gnu::noinline]] free_block allocate_slow(stream_state& mine, std::size_t size,
                                                        cuda_stream_view stream);
  free_block take_unowned(std::size_t size);
  free_block steal(stream_state& mine, std::size_t size, cuda_stream_view stream);
  void adopt_stolen(stream_state& mine, stream_state& donor, FreeList& extra) noexcept;
  void order_after(stream_state& other, cuda_stream_view stream);
  [[gnu::cold, gnu::noinline]] bool reclaim();
  free_block after_growth_hook(stream_state& mine, std::size_t size);
  [[gnu::cold, gnu::noinline]] free_block grow_before_reclaim(std::size_t size,
                                                              cuda_stream_view stream);
  /// True for lists of same-size blocks (fixed_size): a steal takes half of a donor's blocks
  /// behind its one event, and only from a donor with at least min_donor_blocks.
  static constexpr bool same_size_lists()
  {
    return requires(FreeList & a, FreeList & b)
    {
      a.give_half(b);
    };
  }
  static constexpr std::size_t min_donor_blocks = 4;
  [[gnu::cold, gnu::noinline]] free_block grow(std::size_t size, cuda_stream_view stream);
  [[gnu::cold, gnu::noinline]] free_block grow_chunk(std::size_t size, cuda_stream_view stream);
  [[gnu::cold, gnu::noinline]] free_block grow_in_place(std::size_t size);
  /// True for a Derived with `static constexpr bool idle_first = true`: its allocations are served
  /// from the idle list (free memory of no stream) before the stream's own list. The virtual-memory
  /// pool asks for it: a hole left in the idle list pins physical memory, and a stream list that
  /// always wins splits the latest frees instead, so every pass of a repeated workload lays its
  /// blocks out differently and the holes pile up (docs/design.md, "vmm_pool", "Placement").
  /// Only while one stream alone allocates (take_first).
  static constexpr bool serves_idle_first()
  {
    if constexpr (requires { Derived::idle_first; }) {
      return Derived::idle_first;
    } else {
      return false;
    }
  }
  /// True for a Derived that backs one registered range on demand (see the top of this file).
  static constexpr bool backs_in_place()
  {
    return requires(Derived & d, Derived const& cd, FreeList& list, std::size_t n,
                    std::vector<free_block> const& blocks)
    {
      {
        d.grow_in_place(list, n, true)
        } -> std::same_as<free_block>;
      {
        cd.backed_bytes()
        } -> std::convertible_to<std::size_t>;
      cd.check_backing(blocks);
    };
  }

  runtime* runtime_;
  FreeList prototype_;            // an empty list, copied for each new stream
  mutable stream_state unowned_;  // free memory of no stream
  mutable stream_registry<stream_state> streams_;
  mutable allocation_table table_;
  mutable std::mutex grow_mutex_;  // serializes reclaim and growth; guards chunks_
  // The invariant-check build's gate (every allocate and deallocate; detail/invariant_checks.hpp);
  // an empty member otherwise.
  [[no_unique_address]] call_gate gate_;
  struct growth_observer {
    growth_hook_target::hook fn;
    void* context;
  };
  std::vector<growth_observer> growth_hooks_;  // guarded by grow_mutex_; run in order added
  // Solo mode (idle_first only): while one stream alone has allocated, its frees go to unowned_,
  // and solo_pending_ says unowned_ may hold memory that stream's work still uses. Invariant:
  // !solo_pending_ => every block in unowned_ is idle for the device. solo_over_ only goes
  // false -> true (under grow_mutex_ and unowned_.mutex, after the synchronization).
  std::atomic<stream_state*> solo_{};
  std::atomic<bool> solo_over_{false};
  std::atomic<bool> solo_pending_{false};  // written under unowned_.mutex
  cudaEvent_t solo_event_{};               // solo_stream_busy()'s question; guarded by grow_mutex_
  std::vector<free_block> chunks_;         // chunks_[i].chunk == i
  std::atomic<std::size_t> pool_bytes_{};  // == sum of chunks_[i].size
  std::atomic<std::uint64_t> bad_frees_{};
};

}  // namespace gpumem::detail

#include <gpumem/detail/stream_ordered_memory_resource.inl>
