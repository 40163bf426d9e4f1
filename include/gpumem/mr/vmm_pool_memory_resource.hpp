// gpumem/mr/vmm_pool_memory_resource.hpp — a stream-ordered coalescing best-fit pool over one large
// range of device address space that is backed by physical memory only where it is needed (CUDA's
// virtual memory management: cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess).
//
// About as fast as pool_memory_resource on a hit (the same stream-ordered core and free list: no
// driver call; the idle list, memory of no stream, is searched before the stream's own list, under
// its lock, so that a repeated workload refills the same holes and keeps its footprint), and as
// lean as the driver's pool: memory is held in physical granules,
// and when a request needs more contiguous memory than is free, free granules are taken out of
// free holes (unmapped, once the device has passed the frees) and mapped where the request fits,
// so address fragmentation never costs physical memory. New physical memory is taken only when
// the free granules cannot cover the request (plus `growth_percent` of what is mapped, to amortize
// the driver calls). A request fails with out_of_memory only when the device cannot provide the
// physical memory; before failing, the pool releases every free granule it holds.
//
// Memory goes back to the device: above `release_threshold_bytes` of free memory, free granules
// are unmapped at each synchronization point (a growth); `trim_to(n)` unmaps free granules until
// at most n bytes are mapped. Of what they unmap, up to `spare_bytes` of physical handles are kept
// as spares, and the next growth maps those before it creates anything (a re-growth after a trim
// makes no cuMemCreate); the rest is released. Spares are device memory the pool holds
// (stats().held_bytes). They are released by release_spares(), by trim() (the capability that
// empty_cache and out-of-memory retries use), by pause(), before an out of
// memory fails and by the destructor, which releases everything; a growth that must still create
// new memory releases the spares it could not use.
//
// Defaults: the reservation is twice the device's memory (address space is cheap), granules are
// the device's recommended granularity (2 MiB on current GPUs), new memory comes in handles of at
// most 16 MiB at the ends of a growth and 32 MiB between them (a small live block pins at most one
// handle), no growth beyond a need, and the release threshold is unlimited (like
// cuda_async_memory_resource's default).
//
// Errors: cuda_error naming the attribute when the device has no virtual memory management;
// logic_error for a granularity that is not a multiple of the device's; out_of_memory naming the
// request, the physical memory mapped, the free memory and its largest block, and the address
// space left. A failed growth unwinds (the resource stays usable). deallocate never throws; bad
// frees are reported and counted (bad_deallocations()). Thread safety: as pool_memory_resource.
//
// Single-handle allocations (allocate_single_handle): for memory exported to another process
// (export_single_handle, gpumem/ipc/vmm_ipc.hpp) or registered for RDMA / NCCL, one physical
// handle of its own, mapped once in an address range of its own, exportable as a POSIX file
// descriptor. Not carved from the pool: every one costs driver calls; deallocate() frees it
// stream-ordered (its memory is released once the stream has passed the free).
//
// Pause and resume (docs/sleep.md): pause(mode) gives all of the pool's physical memory back to the
// device — discarding its contents, or offloading them to pinned host memory or to a temporary
// file (vmm_pool_options::offload_directory) — and keeps every
// address: live allocations stay live (their pointers dangle until resume()), free memory stays
// free, and resume() maps the same layout at the same addresses (copying offloaded contents back).
// Free whole handles are trimmed first (given back for good, as trim_to(0)): a pause after a
// model's weights were replaced strands nothing, and resume() maps only handles that hold
// allocations. While paused, allocations throw paused_error; deallocations work (bookkeeping only);
// trim_to and growth touch nothing. pause() first synchronizes the device: every stream that may
// use the pool's memory (not only those that allocated) must be done with it; pause(mode, streams)
// synchronizes only the streams named (each once), for a caller that knows which streams use the
// memory (the blocks freed on them are trimmed too; those freed on others are paused).
// Single-handle allocations are not paused. Allocations and frees may run on other threads
// meanwhile (the bookkeeping stays consistent), but an allocation that races with pause() may
// return a block whose memory is being given back, like one made just before it: stop allocating
// before pausing.
//
// Home layout: when a free leaves the whole pool free again (one stream allocating from one host
// thread), the next allocation checks whether growths since the last such moment moved free
// handles; if they did and that stream's work is done (no wait: otherwise the layout stays, and the
// next such moment tries again), the handles go back where they were then (unmap, map, grant: the
// mapping events' cause `home`), so a job run again and again over the pool starts each run from
// the same layout instead of drifting (detail/vmm_home_layout.hpp). Growths that created memory
// or trims that released some make the layout of that moment the new home instead, and so does a
// short run (fewer than 16 frees per handle to move: a loop of one large allocation and its free
// would otherwise move the same handles there and back every time).
//
// Map and unmap listeners (add_map_listener, add_unmap_listener; gpumem/mr/vmm_mapping_event.hpp)
// hear of every physical mapping made (growth, resume: after) and removed (pause: before; moves
// and trims of free memory inside a growth or trim_to: after, once the pool's locks are released —
// such memory holds no allocation). They run outside the pool's locks and may allocate from it.
#pragma once

#include <gpumem/detail/coalescing_free_list.hpp>
#include <gpumem/detail/in_place_growth.hpp>
#include <gpumem/detail/one_stream_placement.hpp>
#include <gpumem/detail/stream_ordered_memory_resource.hpp>
#include <gpumem/detail/vmm_backing.hpp>
#include <gpumem/detail/vmm_listeners.hpp>
#include <gpumem/detail/vmm_single_handles.hpp>
#include <gpumem/mr/vmm_mapping_event.hpp>
#include <gpumem/mr/vmm_pause.hpp>
#include <gpumem/mr/vmm_pool_options.hpp>
#include <gpumem/ipc/vmm_ipc.hpp>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <span>
#include <thread>

namespace gpumem::mr {

/// What the pool holds, for reports (a consistent snapshot).
struct vmm_pool_stats {
  std::size_t mapped_bytes{};    ///< physical memory mapped (what the blocks cover now)
  std::size_t reserved_bytes{};  ///< address space reserved
  std::size_t free_bytes{};      ///< mapped and not handed out
  std::size_t largest_free_bytes{};
  /// Of free_bytes, those in handles that hold no allocation (wholly inside one free block): a
  /// growth moves them where it needs memory, a trim gives them back.
  std::size_t movable_free_bytes{};
  /// free_bytes - movable_free_bytes: free memory inside handles that an allocation also touches,
  /// which only an allocation that fits there can use (at a peak, what the pool holds beyond its
  /// live bytes is mostly this).
  std::size_t pinned_free_bytes{};
  std::size_t handles{};        ///< physical allocations mapped
  std::size_t spare_bytes{};    ///< physical handles kept unmapped for a growth
  std::size_t spare_handles{};  ///< how many
  std::size_t held_bytes{};     ///< device memory held: mapped_bytes + spare_bytes (the footprint)
  std::size_t single_handle_allocations{};  ///< live or waiting for their stream
  std::size_t single_handle_bytes{};        ///< their physical memory (not in mapped_bytes)
  pause_state state{pause_state::active};
  std::size_t paused_bytes{};   ///< the layout's bytes a pause gave back (0 when active)
  std::size_t staging_bytes{};  ///< pinned host memory held for offloading
  /// The file holding the contents of a pause(offload_to_file) (0 when none is open).
  std::size_t offload_file_bytes{};
  std::uint64_t pauses{};   ///< pause() calls that gave memory back
  std::uint64_t resumes{};  ///< resume() calls that mapped it again
  double pause_seconds{};   ///< time spent in those calls, in total
  double resume_seconds{};
  std::uint64_t listener_failures{};  ///< exceptions thrown by map / unmap listeners (caught)
  /// Times the pool, wholly free again, moved handles back where they were the last time it was
  /// wholly free (see "Home layout" above), and the handles so moved.
  std::uint64_t home_returns{};
  std::uint64_t home_moved_handles{};
};

// The stream-ordered core, growing in place, with the one-stream placement (the idle list first
// while one stream alone allocates: free holes are refilled, so a repeated workload keeps its
// layout; without it, the physical footprint crept up every pass of a training trace).
class vmm_pool_memory_resource final : public detail::stream_ordered_memory_resource<
                                           vmm_pool_memory_resource, detail::coalescing_free_list,
                                           detail::in_place_growth, detail::one_stream_placement>,
                                       public trimmable {
  using base =
      detail::stream_ordered_memory_resource<vmm_pool_memory_resource, detail::coalescing_free_list,
                                             detail::in_place_growth, detail::one_stream_placement>;
  friend base;

 public:
  static constexpr std::size_t allocation_alignment = CUDA_ALLOCATION_ALIGNMENT;
  static constexpr char const* resource_name        = "vmm_pool_memory_resource";

  /// Reserves the address range; maps nothing yet.
  explicit vmm_pool_memory_resource(vmm_pool_options const& options = {},
                                    gpumem::runtime& runtime        = gpumem::cuda_device());
  ~vmm_pool_memory_resource() override;

  [[nodiscard]] vmm_pool_options const& options() const noexcept { return options_; }
  [[nodiscard]] std::size_t granularity() const noexcept { return backing_.granularity(); }
  [[nodiscard]] vmm_pool_stats stats() const;
  /// The reserved address range: every block the pool hands out lies in it (fixed for its life).
  [[nodiscard]] std::pair<void*, std::size_t> reserved_range() const noexcept
  {
    auto const r = backing_.range();
    return {r.ptr, r.size};
  }
  /// Unmaps free granules (after a device synchronization) until at most `bytes` are mapped;
  /// keeps up to spare_bytes of their handles as spares and releases the rest. Returns the bytes
  /// unmapped.
  std::size_t trim_to(std::size_t bytes);
  /// Gives every free granule back to the device, spares included (trim_to(0), then
  /// release_spares()), and the pinned host buffer that keep_offload_staging kept after a resume
  /// (release_offload_staging()): what empty_cache, free_all_blocks and an out-of-memory retry
  /// above the pool ask for, when memory is wanted elsewhere (another pool's growth must not fail
  /// for spares held here; the buffer's mapping for the device takes device memory too, about
  /// 0.2 % of its size). trim_to(n) and the release threshold keep both.
  void trim() override
  {
    (void)trim_to(0);
    (void)release_spares();
    (void)release_offload_staging();
  }
  /// Releases the spare handles (see the top of this file). Returns the bytes released.
  std::size_t release_spares() noexcept;
  /// Frees the pinned host buffer kept for the next pause(offload) (keep_offload_staging), unless
  /// a pause holds the pool's contents in it. Returns the bytes freed.
  std::size_t release_offload_staging() noexcept;
  [[nodiscard]] std::size_t release_threshold() const noexcept { return threshold_.load(); }
  void set_release_threshold(std::size_t bytes) noexcept { threshold_.store(bytes); }

  /// `bytes` (rounded up to the granularity) backed by one physical handle of its own, mapped
  /// once, exportable as a POSIX file descriptor, with access for the pool's device and peers.
  /// Usable on any stream at once; free it with deallocate(p, bytes, stream) (stream-ordered).
  /// On out of memory, the pool's free memory is released and the allocation retried once.
  /// Throws logic_error for 0 bytes, out_of_memory, cuda_error when the driver refuses.
  [[nodiscard]] void* allocate_single_handle(std::size_t bytes, cuda_stream_view stream = {});
  /// A new descriptor for the handle of the live single-handle allocation `ptr` (exactly the
  /// pointer allocate_single_handle returned), its size and device. logic_error for any other
  /// pointer; cuda_error when the driver refuses to export.
  [[nodiscard]] vmm_export export_single_handle(void const* ptr) const;

  // -- pause and resume (gpumem/mr/vmm_pause.hpp, docs/sleep.md) --------------------------------
  /// Gives every physical handle back, keeping every address reserved and every block's
  /// bookkeeping; free handles are trimmed first, and resume() maps only the others again.
  /// Synchronizes the device first (the memory may be used by any stream). offload:
  /// the contents are copied to pinned host memory first (on the calling thread's default stream)
  /// and restored by resume(); offload_to_file: written to a new unnamed file in the options'
  /// offload_directory through two pinned buffers of at most 64 MiB each, read back by resume();
  /// discard: they are lost. Returns false (and does nothing) when already paused. Throws
  /// out_of_memory when no host memory can be pinned for an offload, offload_file_error when the
  /// file cannot be created or written (naming its directory and size), and cuda_error when a copy
  /// or the synchronization fails; the pool is then as before (or, if even putting the memory back
  /// failed, paused with its contents offloaded: resume() again).
  bool pause(pause_mode mode);
  /// As pause(mode), but synchronizes only `streams` (each once), not the device: the caller
  /// names every stream that may still use the pool's memory (work queued on any other stream is
  /// not waited for). Free blocks of those streams are trimmed before the pause as pause(mode)
  /// trims every free block; blocks freed on other streams are paused with the rest. An empty
  /// span synchronizes nothing (the caller has done it).
  bool pause(pause_mode mode, std::span<cuda_stream_view const> streams);
  /// Maps the paused layout again at the same addresses (new physical memory) and copies offloaded
  /// contents back (from the file: then closed). Returns false (and does nothing) when active.
  /// Throws out_of_memory or cuda_error when the device refuses, offload_file_error when the file
  /// cannot be read; what it mapped is given back again and the pool stays paused with its
  /// offloaded contents (or file): resume() may be retried.
  bool resume();
  [[nodiscard]] pause_state state() const noexcept { return state_.load(); }
  /// Calls fn after memory is mapped (growth, resume). Returns an id for remove_listener().
  /// Throws logic_error when fn is empty.
  vmm_listener_id add_map_listener(vmm_mapping_listener fn) { return listeners_.add(true, fn); }
  /// Calls fn when memory is unmapped (pause: before; growth, trim: after, outside the locks).
  vmm_listener_id add_unmap_listener(vmm_mapping_listener fn) { return listeners_.add(false, fn); }
  /// False when no listener has this id.
  bool remove_listener(vmm_listener_id id) noexcept { return listeners_.remove(id); }
  /// The runs of adjacent handles mapped now, in address order, as map events (cause growth):
  /// what a listener added before this call will not hear of. Empty while paused.
  [[nodiscard]] std::vector<vmm_mapping_event> mapped_runs();

 private:
  // -- hooks of the stream-ordered core (1-3, then in_place_growth's) ---------------------------
  [[nodiscard]] std::size_t allocation_size(std::size_t bytes) const;
  [[nodiscard]] static bool size_matches(std::size_t bytes, std::size_t block) noexcept
  {
    return can_align_up(bytes, allocation_alignment) &&
           align_up(bytes, allocation_alignment) == block;
  }
  [[gnu::cold, gnu::noinline]] detail::free_block grow_in_place(detail::coalescing_free_list& idle,
                                                                std::size_t size, bool may_move);
  detail::free_block take_grown(detail::coalescing_free_list& idle, detail::free_block const& grown,
                                std::size_t size);
  [[nodiscard]] std::size_t backed_bytes() const noexcept { return backing_.mapped_bytes(); }
  void check_backing(std::vector<detail::free_block> const& blocks) const;

  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  /// The first allocation after a free left the pool wholly free: the home layout (see the top).
  /// Never throws: a failure leaves the layout as it is (or as the backing unwound it).
  [[gnu::cold, gnu::noinline]] void return_home(cuda_stream_view stream) noexcept;
  /// Whether to move handles home now (else the present layout may have become home).
  bool worth_going_home();
  /// Under the grow lock and the idle list's lock, the device done with the idle memory: the
  /// backing's return_home when the pool is still wholly free and active.
  void move_home(detail::coalescing_free_list& idle);
  /// A run must have freed at least this many blocks per handle that going home would move.
  static constexpr std::size_t home_frees_per_handle = 16;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;
  [[noreturn]] void refuse_paused(std::size_t bytes) const;
  /// pause(mode) when `streams` is null, else pause(mode, *streams).
  bool pause_after(pause_mode mode, std::span<cuda_stream_view const> const* streams);
  /// Freezes the pool after synchronizing `streams` (each once) and trims their free blocks.
  void freeze_after(std::span<cuda_stream_view const> streams);
  /// Under the grow lock: what the backing mapped and unmapped goes to the listeners' queue.
  void queue_events() noexcept
  {
    listeners_.queue(backing_.take_events());
    // Without the home layout the placement watches for no wholly free moment (0: none matches).
    if (options_.return_home) { placement().set_pool_bytes(backing_.mapped_bytes()); }
  }
  [[nodiscard]] bool in_range(void const* ptr) const noexcept
  {
    auto const r  = backing_.range();
    auto const* p = static_cast<char const*>(ptr);
    return p >= r.ptr && p < r.ptr + r.size;
  }
  void apply_threshold(detail::coalescing_free_list& idle) noexcept;
  [[noreturn]] void fail(detail::coalescing_free_list const& idle, std::size_t size,
                         char const* why) const;

  vmm_pool_options options_;
  detail::vmm_backing backing_;         // guarded by the core's grow lock
  detail::vmm_single_handles singles_;  // outside the range: not the core's memory
  std::atomic<std::size_t> threshold_;
  // Pause state. frozen_ (allocations and growth refused) is set before a pause starts and cleared
  // after a resume ends; state_ changes under pause_mutex_ and the grow lock. Invariant: state_ !=
  // active => frozen_ and backing_.paused(); state_ == active && !pausing => !backing_.paused().
  std::mutex pause_mutex_;  // one pause or resume at a time (held while they call listeners)
  std::atomic<std::thread::id> transition_thread_{};  // holds pause_mutex_ (re-entry: an error)
  /// Holds pause_mutex_ and names this thread as the one pausing or resuming.
  class transition {
   public:
    explicit transition(vmm_pool_memory_resource* pool);
    ~transition();
    transition(transition const&)            = delete;
    transition& operator=(transition const&) = delete;

   private:
    vmm_pool_memory_resource* pool_;
    std::lock_guard<std::mutex> lock_;
  };
  /// Throws logic_error when this thread is already pausing or resuming this pool (a listener
  /// calling pause or resume), else waits for any other pause or resume.
  [[nodiscard]] transition enter_transition(char const* call);
  std::atomic<pause_state> state_{pause_state::active};
  std::atomic<bool> frozen_{false};
  std::atomic<std::uint64_t> pauses_{};
  std::atomic<std::uint64_t> resumes_{};
  std::atomic<std::uint64_t> pause_ns_{};
  std::atomic<std::uint64_t> resume_ns_{};
  bool home_due_{false};  // a long run left the layout away; going home waits for an idle stream
                          // (guarded by the grow lock)
  std::atomic<std::uint64_t> home_returns_{};
  std::atomic<std::uint64_t> home_moved_handles_{};
  detail::vmm_listeners listeners_;
};

static_assert(
    gpumem::detail::async_resource_with<vmm_pool_memory_resource, cuda::mr::device_accessible>);

}  // namespace gpumem::mr
