// gpumem/detail/stream_ordered_memory_resource.hpp — the stream-ordered core shared by the
// suballocators (pool, fixed_size, vmm_pool): free memory kept per stream, reused at once on the
// stream that freed it, handed to another stream only once that stream is ordered after the free
// (not API).
//
// What lives where (docs/design.md, "Suballocators: pool, fixed_size, binning"):
//   this core   the per-stream lists, the idle list, steal, reclaim, the block table, growth hooks
//   FreeList    the free blocks of one list (coalescing_free_list, fixed_size_free_list), and how a
//               steal takes from another stream's list: FreeList::steal_policy where the list
//               names one (fixed_size_free_list: same_size_steal), else single_block_steal
//   Growth      where new memory comes from: chunk_growth (chunks from an upstream; the default)
//               or in_place_growth (backing more of one reserved range: vmm_pool)
//   Placement   which list serves a stream first and takes its frees: per_stream_placement (the
//               default) or one_stream_placement (vmm_pool)
//
// State:
//   streams_   per stream: a mutex, a free list, the stream's identity, a lazily created event.
//              Found through a thread-local cache (stream_registry), no global lock.
//   unowned_   the idle list: free memory no stream has touched since it came from upstream (or
//              since a device synchronization): any stream takes it without waiting.
//   table_     handed-out blocks by pointer (true size and chunk; detects double / foreign frees).
//   growth_    the chunks (or the range) and the pool size.
//
// allocate(size, S), in this order:
//   1. hit: S's own list, S's mutex only, no runtime call (Placement may look in the idle list
//      first, after having the other streams' frees handed over to it: hand_over, which makes
//      runtime calls);
//   2. the idle list;
//   3. steal from another stream A's list: record A's event now (after the free, so it covers
//      it), make S wait on it, take the block (and what the steal policy takes along). Skipped for
//      another thread's per-thread default stream (an event recorded on cudaStreamPerThread from
//      this thread would land on the wrong stream);
//   4. under grow_mutex_: the idle list again (another thread grew meanwhile);
//   5. a steal policy that lets donors keep their last blocks (grows_before_reclaim) grows here,
//      and reclaims only when the upstream is out of memory;
//   6. reclaim: detach every stream's list, synchronize the device (all work enqueued before the
//      frees is done), merge everything into the idle list (coalescing across streams), retry;
//   7. the growth hooks (growth_hook.hpp), when one gives memory back: S's list and the idle list,
//      then reclaim again, retry;
//   8. grow (Growth), the request taken from the new memory directly.
// deallocate(p, n, S): look p up in table_ (unknown: reported, ignored), insert into S's list
// (coalescing), or where Placement takes it. No runtime call.
//
// Invariants (check_invariants(), throws logic_error naming the broken equality):
//   free bytes (all lists) + handed-out bytes (table_) == pool size (growth_.bytes())
//   every block lies inside its chunk; no two blocks (free or handed out) overlap
//   each list's, Growth's and Placement's own invariants
//
// Derived (CRTP) provides, privately with this class as friend:
//   1. static constexpr char const* resource_name;
//   2. std::size_t allocation_size(std::size_t bytes) const;  // block size; throws when too big
//   3. bool size_matches(std::size_t bytes, std::size_t block) const noexcept;
//   4. the hooks of its Growth, one a line:
//      chunk_growth:    free_block allocate_chunk(std::size_t size, cuda_stream_view stream);
//      chunk_growth:    void deallocate_chunk(free_block chunk) noexcept;
//      in_place_growth: free_block grow_in_place(FreeList& idle, std::size_t size, bool move);
//      in_place_growth: std::size_t backed_bytes() const noexcept;
//      in_place_growth: void check_backing(std::vector<free_block> const& blocks) const;
//   5. a destructor that calls release_all().
// A chunk_growth Derived may adopt_chunk() an initial chunk; an in_place_growth one registers its
// range (register_range()) and reaches the idle memory at a synchronization point (with_idle()).
//
// Thread safety: allocate/deallocate from any thread. check_invariants() needs no concurrent
// allocate/deallocate. Lock order: grow_mutex_ < registry < a stream's mutex < the idle list's
// mutex (only hand_over holds both) < table_ shards.
#pragma once

#include <gpumem/detail/allocation_table.hpp>
#include <gpumem/detail/chunk_growth.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/free_block.hpp>
#include <gpumem/detail/growth_hook.hpp>
#include <gpumem/detail/invariant.hpp>
#include <gpumem/detail/invariant_checks.hpp>
#include <gpumem/detail/runtime.hpp>
#include <gpumem/detail/spin_mutex.hpp>
#include <gpumem/detail/stream_registry.hpp>
#include <gpumem/mr/capabilities.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <algorithm>
#include <atomic>
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
/// Checks that blocks (any order) lie within their chunks and do not overlap.
void check_blocks(char const* resource, std::vector<free_block> blocks,
                  std::vector<free_block> const& chunks);

/// The default placement: each stream's frees stay in its own list, which serves it first.
template <class State>
struct per_stream_placement {
  per_stream_placement(runtime& /*rt*/, State& /*idle*/, std::mutex& /*grow_mutex*/) noexcept {}
  static constexpr bool idle_first(State& /*mine*/) noexcept { return false; }
  static constexpr bool free_to_idle(State& /*mine*/, free_block const& /*block*/) noexcept
  {
    return false;
  }
  static constexpr bool idle_in_use(State& /*mine*/) noexcept { return false; }
  static constexpr void settle_idle() noexcept {}
  static constexpr void order_for(State& /*mine*/) noexcept {}
  static constexpr bool take_handover() noexcept { return false; }
  static constexpr bool accept_handover() noexcept { return false; }
  static constexpr void check_invariants(char const* /*resource*/) noexcept {}
};

/// The default steal: the one block asked for, from any stream that has one.
struct single_block_steal {
  static constexpr bool grows_before_reclaim = false;
  template <class List>
  explicit single_block_steal(List const& /*prototype*/) noexcept
  {
  }
  template <class List>
  static constexpr bool donor_keeps(List const& /*donor*/) noexcept
  {
    return false;
  }
  template <class List>
  static void take_extra(List& /*donor*/) noexcept
  {
  }
  static constexpr bool has_extra() noexcept { return false; }
  template <class List>
  static void deliver_to(List& /*list*/) noexcept
  {
  }
};

/// FreeList::steal_policy where the list names one, else single_block_steal.
template <class FreeList>
struct steal_policy_of {
  using type = single_block_steal;
};
template <class FreeList>
requires requires
{
  typename FreeList::steal_policy;
}
struct steal_policy_of<FreeList> {
  using type = typename FreeList::steal_policy;
};

template <class Derived, class FreeList, class Growth = chunk_growth,
          template <class> class Placement = per_stream_placement>
class stream_ordered_memory_resource : public mr::device_memory_resource,
                                       public mr::pool_size_source,
                                       public growth_hook_target {
 public:
  stream_ordered_memory_resource(stream_ordered_memory_resource const&)            = delete;
  stream_ordered_memory_resource& operator=(stream_ordered_memory_resource const&) = delete;

  /// Total bytes taken from upstream or backed (free and handed out).
  [[nodiscard]] std::size_t pool_size() const noexcept override { return growth_.bytes(); }
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
  /// Every free block of every list (each list's lock taken in turn, as get_free_stats does: with
  /// other threads allocating, a snapshot that may miss or repeat a block moving between lists).
  [[nodiscard]] std::vector<free_block> free_blocks() const;
  void check_invariants() const;
  [[nodiscard]] bool lean() const noexcept override { return Growth::lean; }
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
            [this](stream_identity id) { return std::make_unique<stream_state>(id, prototype_); }},
        placement_{rt, unowned_, grow_mutex_}
  {
  }
  ~stream_ordered_memory_resource() override;

  /// Registers an upstream chunk (e.g. the initial pool) as free memory of no stream
  /// (chunk_growth).
  void adopt_chunk(free_block chunk);
  /// Registers the address range whose memory Derived backs on demand (in_place_growth); nothing
  /// becomes free. Blocks name it as their chunk.
  void register_range(free_block range)
  {
    std::lock_guard lock{grow_mutex_};
    growth_.register_range(range);
  }
  /// Under the grow lock: moves every stream's free memory to the idle list behind a device
  /// synchronization (as before a growth), then calls f(idle list) and returns its result
  /// (in_place_growth: the pool size follows the backing afterwards).
  template <class F>
  decltype(auto) with_idle(F&& f);
  /// Under the grow lock: moves the free memory of the streams in `passed` to the idle list with
  /// no device synchronization, then calls f(idle list). The caller has just synchronized those
  /// streams and stopped allocations (the virtual-memory pool's pause, which gives all of its
  /// memory back anyway: a block freed on them after that synchronization is moved too).
  template <class F>
  decltype(auto) with_idle_of(std::vector<cudaStream_t> const& passed, F&& f);
  /// Under the grow lock and the idle list's lock, f(idle list) when no queued work on `stream`
  /// may still use an idle block (the placement's pending frees are done: it synchronizes then,
  /// without waiting for that work), and returns true; returns false, calling nothing, while such
  /// work still runs. The other streams' free memory stays where it is (no reclaim). In-place
  /// growth: the pool size follows the backing afterwards.
  template <class F>
  bool with_idle_when_done(cuda_stream_view stream, F&& f);
  /// The placement, for a Derived that asks it what only it knows (one_stream_placement's
  /// watch_for_empty / take_emptied).
  auto& placement() noexcept { return placement_; }
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
  using steal_policy = typename steal_policy_of<FreeList>::type;

  /// What Growth asks of Derived (hook 4) and of the core, for one growth or check. Self is
  /// Derived or Derived const; only the members Growth calls are instantiated.
  template <class Self>
  struct growth_source {
    Self& derived;
    FreeList const& prototype;
    cuda_stream_view stream;

    free_block allocate_chunk(std::size_t size) { return derived.allocate_chunk(size, stream); }
    void deallocate_chunk(free_block chunk) noexcept { derived.deallocate_chunk(chunk); }
    [[nodiscard]] FreeList empty_list() const { return FreeList{prototype}; }
    free_block grow_in_place(FreeList& idle, std::size_t size, bool may_move)
    {
      return derived.grow_in_place(idle, size, may_move);
    }
    [[nodiscard]] std::size_t backed_bytes() const noexcept { return derived.backed_bytes(); }
    void check_backing(std::vector<free_block> const& blocks) const
    {
      derived.check_backing(blocks);
    }
  };
  growth_source<Derived> source(cuda_stream_view stream = {}) noexcept
  {
    return {derived(), prototype_, stream};
  }
  growth_source<Derived const> source() const noexcept { return {derived(), prototype_, {}}; }

  Derived& derived() noexcept { return static_cast<Derived&>(*this); }
  Derived const& derived() const noexcept { return static_cast<Derived const&>(*this); }

 protected:
  /// The invariant-check build's check after a Derived's own slow path `where` (one that runs
  /// outside allocate and deallocate): with the call gate held, so that no other call is halfway
  /// through (a block taken from a list and not yet in the table). Nothing in other builds.
  void check_after_own_slow_path(char const* where) noexcept
  {
    if constexpr (invariant_check_build) {
      [[maybe_unused]] auto const gate = gate_.enter();
      check_after_slow_path(where, [this] { derived().check_invariants(); });
    }
  }

  // A Derived that refuses allocations in some state (the virtual-memory pool while paused)
  // checks first and passes the rest here.
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
    if (!try_deallocate(ptr, bytes, stream)) {
      report_bad(ptr, bytes, "not handed out by this resource (double free or foreign pointer)");
    }
  }
  /// Frees `ptr` on `stream` when this resource handed it out, and returns true (a size that
  /// differs from the allocation is reported and the block freed); returns false, reporting
  /// nothing, for any other pointer. One table probe: a resource over several of these (binning)
  /// asks each candidate once. Always inlined: with two callers (do_deallocate and binning) the
  /// compiler made it a call, which cost fixed_size's alloc+free pair about 8 %.
  [[gnu::always_inline]] bool try_deallocate(void* ptr, std::size_t bytes,
                                             cuda_stream_view stream) noexcept
  {
    [[maybe_unused]] auto const gate = gate_.enter();
    auto const block                 = table_.erase(ptr);
    if (!block) { return false; }
    if (!derived().size_matches(bytes, block->size)) {
      report_bad(ptr, bytes,
                 format("size differs from the allocation (block of ", block->size,
                        " bytes); the block is freed"));
    }
    auto& mine = streams_.get(stream.value());
    if (placement_.free_to_idle(mine, *block)) { return true; }
    std::lock_guard lock{mine.mutex};
    mine.list.insert(*block);
    mine.maybe_free.store(true, std::memory_order_relaxed);
    return true;
  }
  /// Reports a bad deallocation and counts it in bad_deallocations().
  void report_bad(void const* ptr, std::size_t bytes, std::string const& why) noexcept;

 private:
  /// The hit path's first fit: the stream's own list, or the idle list first where Placement
  /// says so (one_stream_placement, while one stream alone allocates).
  free_block take_first(stream_state& mine, std::size_t size)
  {
    if (placement_.idle_first(mine)) {
      if (placement_.take_handover()) [[unlikely]] { hand_over(mine); }
      if (auto b = take_unowned(size); b.valid()) { return b; }
    }
    return take_from(mine, size);  // built in place: no copy of the block
  }
  static free_block take_from(stream_state& s, std::size_t size)
  {
    std::lock_guard lock{s.mutex};
    return s.list.take(size);
  }
  void record(stream_state& mine, free_block const& block);
  [[gnu::cold, gnu::noinline]] free_block allocate_slow(stream_state& mine, std::size_t size,
                                                        cuda_stream_view stream);
  /// The idle list's best fit (the hot path: the placement put `mine` there first).
  free_block take_unowned(std::size_t size);
  /// The same for `mine`'s slow path (see the .inl).
  free_block take_unowned(stream_state& mine, std::size_t size);
  free_block steal(stream_state& mine, std::size_t size, cuda_stream_view stream);
  void adopt_stolen(stream_state& mine, stream_state& donor, steal_policy& taken) noexcept;
  void order_after(stream_state& other, cuda_stream_view stream);
  [[gnu::cold, gnu::noinline]] bool reclaim();
  [[gnu::cold, gnu::noinline]] void hand_over(stream_state& first);
  free_block after_growth_hook(stream_state& mine, std::size_t size);
  free_block grow_before_reclaim(stream_state& mine, std::size_t size, cuda_stream_view stream);
  /// What the growth asks the placement, for a growth on `mine`.
  struct placement_for {
    Placement<stream_state>* placement;
    stream_state* mine;
    bool idle_in_use() { return placement->idle_in_use(*mine); }
    void settle_idle() { placement->settle_idle(); }
  };
  [[gnu::cold, gnu::noinline]] free_block grow(stream_state& mine, std::size_t size,
                                               cuda_stream_view stream)
  {
    auto src = source(stream);
    placement_for asked{&placement_, &mine};
    return growth_.grow(src, unowned_, size, asked);
  }

  runtime* runtime_;
  FreeList prototype_;            // an empty list, copied for each new stream
  mutable stream_state unowned_;  // free memory of no stream (the idle list)
  mutable stream_registry<stream_state> streams_;
  mutable allocation_table table_;
  mutable std::mutex grow_mutex_;  // serializes reclaim and growth; guards growth_
  // The invariant-check build's gate (every allocate and deallocate; detail/invariant_checks.hpp);
  // an empty member otherwise.
  [[no_unique_address]] call_gate gate_;
  struct growth_observer {
    growth_hook_target::hook fn;
    void* context;
  };
  std::vector<growth_observer> growth_hooks_;  // guarded by grow_mutex_; run in order added
  [[no_unique_address]] Placement<stream_state> placement_;
  Growth growth_;
  std::atomic<std::uint64_t> bad_frees_{};
};

}  // namespace gpumem::detail

#include <gpumem/detail/stream_ordered_memory_resource.inl>
