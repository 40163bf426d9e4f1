// gpumem/detail/vmm_backing.hpp — one reserved range of device address space, backed by physical
// memory on demand (not API; the virtual-memory pool's slow paths).
//
// The range is tiled by mappings (a physical handle mapped whole at an address) and unmapped
// ranges. The pool's free lists and handed-out blocks cover exactly the mapped bytes; this class
// never sees handed-out blocks, only the pool's *idle* free list (memory no stream is using: the
// pool synchronized before handing it over), which it may change:
//   extend(idle, n, may_move)
//                     makes idle hold a block of n bytes: picks the unmapped range whose mapping
//                     joins the most free memory already mapped next to it (of equal cost, one
//                     growing downward: see place()), fills it first with
//                     handles taken from free holes elsewhere (unmapped there, mapped here: address
//                     fragmentation never costs physical memory), and only then with new handles
//                     (handle_bytes at the ends, twice that between; plus growth_percent of what
//                     is mapped, to amortize the driver calls);
//                     without may_move, only with spares and new handles (plus
//                     busy_growth_percent). Spare handles (below) are mapped before any new one is
//                     created; a growth that still creates releases the spares it could not use.
//   release_idle(idle, keep)  unmaps handles lying wholly in idle free blocks, largest first,
//                     until at most `keep` bytes are mapped (trim, release threshold, OOM), and
//                     keeps them as spares up to spare_bytes (the rest is released).
//   release_spares()  releases the spare handles (pause, out of memory, destruction, on request).
//   moves_home() / remember_home() / return_home(idle)
//                     when the pool is wholly free: which handles growths moved since the layout
//                     was remembered, remembering the present one instead, and moving them back
//                     (vmm_home_layout.hpp), so a job run again and again starts every run from
//                     the same layout.
// Every driver call that may fail comes after the new idle list is built, and a failure unwinds:
// the idle list and the tiling always agree with what is really mapped.
//   pause(mode, stream)  gives every mapping's physical memory back (offload: its bytes copied
//                     to pinned host memory first, copies overlapped with the unmaps;
//                     offload_to_file: copied through a ring of pinned slots to a temporary file,
//                     each chunk unmapped once its bytes are in the file); the mappings
//                     stay in mapped_ as the *layout* (absent: no handle), so the pool's blocks
//                     keep their addresses. extend / release_idle refuse while paused.
//   resume(stream)    creates, maps and grants access to the absent mappings at their addresses
//                     and copies the offloaded bytes back (from the file: through the same ring);
//                     a failure unwinds what it mapped (the backing stays paused, the host copy or
//                     the file intact).
//
// Invariants (check()):
//   mapped_bytes_ == sum of mapping sizes; mappings and unmapped ranges are disjoint, lie in the
//   reservation and cover it exactly; unmapped ranges are coalesced;
//   every block (free or handed out) lies inside one run of adjacent mappings;
//   sum of block sizes == mapped_bytes_.
//   absent_bytes_ / absent_count_ == sum / count of absent mappings; !paused_ => none absent;
//   staged_ => paused_ and the staging buffer holds every mapping (staging_bytes_ >=
//   mapped_bytes_); file_.is_open() => paused_ && !staged_ and the file holds every mapping at
//   its `staged` offset.
//   spares: their own (vmm_spares::check); no spare handle is mapped; paused_ => no spares.
//   home: its own (vmm_home_layout::check); every home slot lies in the reservation.
// Thread safety: none (the pool calls it under its grow lock).
#pragma once

#include <gpumem/detail/coalescing_free_list.hpp>
#include <gpumem/detail/free_block.hpp>
#include <gpumem/detail/offload_file.hpp>
#include <gpumem/detail/pinned_ring.hpp>
#include <gpumem/detail/runtime.hpp>
#include <gpumem/detail/vmm_home_layout.hpp>
#include <gpumem/detail/vmm_spares.hpp>
#include <gpumem/mr/vmm_mapping_event.hpp>
#include <gpumem/mr/vmm_pause.hpp>
#include <gpumem/mr/vmm_pool_options.hpp>

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace gpumem::detail {

class vmm_backing {
 public:
  /// Queries the granularity (cuda_error when the device has no virtual memory management) and
  /// reserves the range. Reads the pool's options whole: reserve_bytes, granularity_bytes,
  /// growth_percent, busy_growth_percent, handle_bytes, spare_bytes, device, peer_devices,
  /// all_peers, shareable_handles and gpu_direct_rdma (the others are the pool's). Throws
  /// logic_error for a granularity that is not a multiple of the device's, out_of_memory when the
  /// address space cannot be reserved.
  vmm_backing(runtime& rt, mr::vmm_pool_options const& options);
  vmm_backing(vmm_backing const&)            = delete;
  vmm_backing& operator=(vmm_backing const&) = delete;
  /// Unmaps and releases everything and gives the range back.
  ~vmm_backing();

  [[nodiscard]] free_block range() const noexcept { return {base_, reserved_, 0}; }
  [[nodiscard]] std::size_t granularity() const noexcept { return granularity_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  /// What every handle is made with: the options' shareable_handles, and gpu_direct_rdma where
  /// the device supports it.
  [[nodiscard]] vmm_handle_properties handle_properties() const noexcept { return properties_; }
  /// The other devices that get access to every mapping (validated at construction).
  [[nodiscard]] std::vector<int> const& peers() const noexcept { return peers_; }
  /// The layout's bytes (what the pool's blocks cover), paused or not.
  [[nodiscard]] std::size_t mapped_bytes() const noexcept { return mapped_bytes_; }
  /// Physical memory mapped now (mapped_bytes() less what a pause gave back).
  [[nodiscard]] std::size_t physical_bytes() const noexcept
  {
    return mapped_bytes_ - absent_bytes_;
  }
  [[nodiscard]] std::size_t handle_count() const noexcept { return mapped_.size() - absent_count_; }
  [[nodiscard]] std::size_t unmapped_bytes() const noexcept { return reserved_ - mapped_bytes_; }
  [[nodiscard]] std::size_t largest_unmapped() const noexcept;
  /// Physical handles unmapped and kept for the next growth (device memory held, not mapped).
  [[nodiscard]] std::size_t spare_bytes() const noexcept { return spares_.bytes(); }
  [[nodiscard]] std::size_t spare_count() const noexcept { return spares_.count(); }
  /// Releases the spare handles; returns the bytes released.
  std::size_t release_spares() noexcept { return spares_.release_all(); }

  /// Call with the pool wholly free. The handles return_home() would move: the same handles as
  /// when the layout was last remembered are mapped, these elsewhere. Otherwise (the first time,
  /// or memory was created or released since) the present layout is remembered as home and the
  /// answer is 0. No driver call; 0 while paused. May throw bad_alloc.
  std::size_t moves_home();
  /// The present layout becomes home (no driver call; nothing while paused). May throw bad_alloc.
  void remember_home();
  /// With every mapped byte free in `idle` and the device done with it: unmaps each handle that
  /// is not at home and maps it at an empty home slot of its size (access granted per run of
  /// adjacent slots), and idle then holds the home layout's runs. Returns the handles moved.
  /// Throws bad_alloc before any driver call (nothing changed), or what a failed map or grant
  /// throws: the handles moved in this call are then unmapped and kept as spares (or released
  /// beyond the spares' limit), idle covers what stays mapped, and that layout becomes home.
  std::size_t return_home(coalescing_free_list& idle);

  /// See the top of this file. Throws out_of_memory (nothing changed, or handles released on the
  /// way out of a failed driver call) when the device or the range cannot provide n bytes.
  /// may_move false: new handles only (no free memory is unmapped: the device may still use it).
  /// Returns the free block of idle that holds the new mapping (joined with its free neighbours).
  free_block extend(coalescing_free_list& idle, std::size_t n, bool may_move = true);
  /// Where in `block` (a block extend() returned) a request of n bytes goes: at its low end when
  /// unmapped address space follows it, so that the rest joins the next growth there; else at its
  /// high end (the free list's own placement). A growth per request of a slightly odd size then
  /// wastes less than one granule in all, not one per request. extend() prefers a downward growth
  /// among equal-cost ones: the request then sits at the high end, where a warm pass's best fit
  /// cuts it again, so a repeated workload finds its cold layout without moving memory.
  [[nodiscard]] char* place(free_block const& block, std::size_t n) const noexcept;
  /// Of the free blocks given (the pool's, from every list, in any order), the bytes of the
  /// handles that lie wholly inside one of them: free memory a growth may move and a trim may
  /// release. The rest of the free bytes share a handle with an allocation (pinned).
  [[nodiscard]] std::size_t movable_bytes(std::vector<free_block> const& free) const noexcept;
  /// See the top of this file; returns the bytes unmapped (some may be kept as spares).
  std::size_t release_idle(coalescing_free_list& idle, std::size_t keep_mapped_bytes) noexcept;
  void check(std::vector<free_block> const& blocks) const;

  // -- pause and resume (src/detail/vmm_backing_pause.cpp) ------------------------------------
  /// One run of adjacent mappings with physical memory: where and which handles.
  struct run {
    char* at{};
    std::size_t bytes{};
    std::vector<vmm_handle> handles;
    std::vector<std::size_t> sizes;  // each handle's bytes
  };
  /// Whether a pause gave the memory back (until a resume succeeds).
  [[nodiscard]] bool paused() const noexcept { return paused_; }
  /// Whether the paused memory's contents are held in host memory or in a file.
  [[nodiscard]] bool offloaded() const noexcept { return staged_ || file_.is_open(); }
  /// The size of the file holding the paused contents (0 when none is open).
  [[nodiscard]] std::size_t offload_file_bytes() const noexcept
  {
    return file_.is_open() ? file_.bytes() : 0;
  }
  /// Bytes of pinned host memory held for offloading (kept between pauses when asked).
  [[nodiscard]] std::size_t staging_bytes() const noexcept { return staging_bytes_; }
  /// The runs of adjacent mappings that have physical memory, in address order.
  [[nodiscard]] std::vector<run> present_runs() const;
  /// Gives every mapping's physical memory back (the device must be done with it). offload: its
  /// bytes are copied to pinned host memory on `stream` first; offload_to_file: to a new file in
  /// the options' offload_directory, through at most file_slots x file_slot_bytes of pinned host
  /// memory. Throws logic_error when paused, out_of_memory when no host memory can be pinned and
  /// offload_file_error when the file cannot be created (nothing changed), cuda_error or
  /// offload_file_error when a copy or a write fails (what was given back is mapped and copied
  /// back again; if that fails too, the backing stays paused with the host copy or the file, and
  /// resume() finishes the job).
  void pause(pause_mode mode, cudaStream_t stream);
  /// The pinned host memory an offload to a file uses at most: two slots of 64 MiB.
  static constexpr std::size_t file_slot_bytes = std::size_t{64} << 20;
  static constexpr std::size_t file_slots      = 2;
  /// Maps the paused layout again (new handles, the same addresses, access for the device and
  /// peers) and copies the offloaded bytes back on `stream` (then synchronizes it; from a file:
  /// read into the pinned slots, then copied, and the file closed). Throws logic_error when not
  /// paused, out_of_memory / cuda_error / offload_file_error when the device, the host or the file
  /// refuses: what this call mapped is unmapped again and the backing stays paused with its host
  /// copy or its file.
  /// keep_staging: the pinned host memory stays for the next pause; otherwise it is freed.
  /// Returns the runs it mapped.
  std::vector<run> resume(cudaStream_t stream, bool keep_staging);
  /// Frees the pinned host memory unless a paused offload still needs it.
  void release_staging() noexcept;
  /// What extend and release_idle mapped and unmapped since the last call, in order, for
  /// listeners; recorded only while set_recording(true) (an event is lost when host memory is).
  void set_recording(bool on) noexcept { recording_ = on; }
  [[nodiscard]] std::vector<vmm_mapping_event> take_events() noexcept { return std::move(events_); }

 private:
  struct mapping {
    std::size_t bytes{};
    vmm_handle handle{};
    bool present{true};    // false: paused, no physical memory (handle is 0)
    std::size_t staged{};  // where its bytes are in the staging buffer (staged_ only)
  };
  struct target {  // where extend() maps: [at, at + bytes) of one unmapped range
    char* at{};
    std::size_t bytes{};
    std::size_t room{};  // how far the mapping may still grow (in its direction)
    bool downward{};     // grows towards lower addresses (joins the free block above it)
    std::size_t cost{};  // bytes to map
  };
  struct piece {  // one handle to map at the target
    vmm_handle handle{};
    std::size_t bytes{};
    char* from{};     // its current address (a donor), or null (new or spare)
    free_block in{};  // a donor's free block when it was found
    bool spare{};     // taken from the spares (unmapped, not new)
  };

  [[nodiscard]] target plan(coalescing_free_list const& idle, std::size_t n) const;
  [[nodiscard]] std::vector<piece> idle_handles(coalescing_free_list const& idle,
                                                target const* excluded) const;
  /// Carves the donors' ranges out of idle (host memory only; a failure changes nothing).
  static void take_out(coalescing_free_list& idle, std::vector<piece> const& pieces);
  std::vector<piece> fill(target& t, std::vector<piece> donors, std::size_t growth);
  void take_spares(target& t, std::size_t& remaining, std::vector<piece>& out);
  void create_pieces(std::size_t bytes, std::vector<piece>& out);
  /// Maps the pieces at the target (donors taken out of idle and unmapped first); returns the
  /// free block of idle that holds the mapping, joined with its free neighbours as they are once
  /// the donors are out (a target that grew into its room may reach a block that gave a donor).
  free_block execute(coalescing_free_list& idle, target const& t, std::vector<piece>& pieces);
  void unmap_donor(piece const& p) noexcept;
  void retire(piece const& p) noexcept;
  void map_at(char* at, piece const& p);
  /// Read-write access to [at, at + bytes) (mapped) for the pool's device and every peer.
  void grant(char* at, std::size_t bytes);
  void unmap_range(char* at, std::size_t bytes) noexcept;
  void add_unmapped(char* at, std::size_t bytes);
  void take_unmapped(char* at, std::size_t bytes);
  [[nodiscard]] std::string describe() const;
  void ensure_staging(std::size_t bytes);
  struct chunk {  // adjacent present mappings handled together
    char* at{};
    std::size_t bytes{};
    std::size_t count{};
  };
  [[nodiscard]] std::vector<chunk> chunks(std::size_t limit) const;
  void offload_all(std::vector<chunk> const& order, cudaStream_t stream);
  [[nodiscard]] std::size_t file_ring_bytes() const noexcept;
  void write_all(std::vector<chunk> const& order, cudaStream_t stream);
  void read_back(pinned_ring& ring, char* at, std::size_t offset, std::size_t bytes,
                 cudaStream_t stream);
  void undo_pause(std::size_t given_back, cudaStream_t stream) noexcept;
  void give_back(chunk const& c) noexcept;
  void drop(mapping& m, char* at) noexcept;
  void forget_handle(mapping& m) noexcept;
  std::map<char*, mapping>::iterator map_absent_run(std::map<char*, mapping>::iterator first,
                                                    std::vector<char*>& done, cudaStream_t stream,
                                                    pinned_ring* ring);
  void unmap_again(std::vector<char*> const& done) noexcept;
  [[nodiscard]] std::vector<run> runs_of(std::vector<char*> const& addresses) const;
  void note(vmm_mapping_cause cause, bool mapped, char* at, std::size_t bytes,
            std::vector<vmm_handle> handles, std::vector<std::size_t> sizes) noexcept;

  runtime* runtime_;
  int device_;
  std::vector<int> peers_;  ///< devices given access besides device_ (peer capable)
  std::size_t granularity_;
  std::size_t reserved_;
  unsigned growth_percent_;
  unsigned busy_growth_percent_;
  std::size_t handle_bytes_{};        // largest new handle, a multiple of the granularity
  vmm_handle_properties properties_;  // every handle's
  char* base_{};
  std::uint32_t idle_chunk_{};             // the chunk number the pool's blocks carry
  std::map<char*, mapping> mapped_;        // address -> mapping
  std::map<char*, std::size_t> unmapped_;  // address -> bytes, coalesced
  std::size_t mapped_bytes_{};             // == sum of mapped_ sizes
  std::size_t absent_bytes_{};             // == sum of sizes of mappings paused (not present)
  std::size_t absent_count_{};             // == their count
  bool paused_{};                          // a pause gave memory back; no resume succeeded since
  bool staged_{};                          // the paused contents are in staging_
  void* staging_{};                        // pinned host memory for offloading
  std::size_t staging_bytes_{};
  std::string offload_directory_;          // the options' (empty: TMPDIR, else /tmp)
  offload_file file_;                      // open: the paused contents are in it (at `staged`)
  bool recording_{};                       // listeners exist: note the runs mapped and unmapped
  std::vector<vmm_mapping_event> events_;  // recorded for listeners (unmaps have no handles left)
  vmm_spares spares_;                      // unmapped handles kept for the next growth
  vmm_home_layout home_;                   // the layout when the pool was last wholly free
  [[nodiscard]] std::vector<vmm_home_layout::slot> present_slots() const;
  [[nodiscard]] coalescing_free_list idle_of(std::vector<vmm_home_layout::slot> const& slots) const;
  void unwind_home(std::vector<vmm_home_layout::move> const& moves,
                   std::vector<vmm_handle> const& handles, std::size_t mapped) noexcept;
};

}  // namespace gpumem::detail
