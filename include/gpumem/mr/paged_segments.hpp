// gpumem/mr/paged_segments.hpp — segments whose physical memory follows what lives in them: a
// segment is reserved address space only, and each page (the device's mapping granularity) of it
// is backed while a block in it is live, or kept while few are free. Made for an allocator that
// places blocks inside segments itself and says where (PyTorch's caching allocator inside a
// torch.cuda.MemPool, through its trace of allocations and frees): the segments it holds can be
// far larger than its live blocks, while the device holds little more than the live pages.
//
//   gpumem::mr::paged_segments seg{{.device = 0}};
//   void* s = seg.reserve_segment(20 << 20);        // address space only
//   seg.back(s, 3 << 20, stream);                    // a block lives at s: pages 0..1 backed
//   seg.unback(s, 3 << 20, stream);                  // freed on stream: its pages become free
//   seg.release_segment(s, 20 << 20);                // gone: its pages given back
//
// Backing a page takes, in this order: the page's own memory when it is free and still mapped
// (reused in place), a new physical handle while the free mapped pages are no more than
// `slack` × the most pages ever live at once, else the page that became free longest ago (moved:
// unmapped there, mapped here, after the work queued before its free has finished). So what the
// device holds stays within (1 + slack) × the peak of live pages, plus one page per new handle.
//
// Stream safety: unback records an event on the freeing stream (one per call that freed a page);
// a free page is unmapped (moved, trimmed, released) only once its event has completed, waiting
// for it if it has not. Pages freed while their stream is being captured into a CUDA graph are
// never moved or trimmed (the graph may use them again); backing while capturing never waits and
// never moves (it creates). A page whose work cannot be waited for (a graph captured elsewhere in
// global mode refuses event queries) is not moved: a new handle is made instead.
//
// Errors: logic_error for a range outside every live segment, a size of 0 or an unknown segment
// (release_segment and unback report and ignore instead: they never throw); out_of_memory when
// the address space or the device has no room (back() names the bytes backed and live). A failed
// back() changes nothing: pages it took are given back.
//
// Invariants (check_invariants): live_pages() == pages with a live count > 0; every such page is
// mapped; free pages (mapped, count 0) == the free list (oldest first) + the pinned ones;
// every mapped page lies in a live segment; segments never overlap; backed_bytes() ==
// mapped pages × granularity.
// Thread safety: every call takes one mutex (PyTorch calls under its own allocator lock).
#pragma once

#include <gpumem/runtime.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace gpumem::mr {

struct paged_segments_options {
  int device{-1};  ///< -1: the current device at construction
  /// Address space reserved for all segments together (a multiple of the granularity); 0: twice
  /// the device's memory.
  std::size_t reserve_bytes{};
  /// Free pages kept mapped, as a fraction of the most pages live at once, before pages move
  /// (0: never more pages than were ever live at once).
  double slack{0.0};
};

struct paged_segments_stats {
  std::size_t granularity{};      ///< bytes per page
  std::size_t segments{};         ///< live segments
  std::size_t segment_bytes{};    ///< their address space
  std::size_t backed_bytes{};     ///< physical memory mapped (live and free pages)
  std::size_t live_pages{};       ///< pages a live block touches
  std::size_t peak_live_pages{};  ///< the most at once so far
  std::size_t free_pages{};       ///< mapped, no live block
  std::uint64_t created{};        ///< physical handles made
  std::uint64_t moved{};          ///< pages moved to back another
  std::uint64_t waited{};         ///< moves or releases that waited for the device
  std::uint64_t released{};       ///< handles given back (segments released, trims)
  double back_seconds{};          ///< host time inside back() (driver calls and waits included)
  double unback_seconds{};        ///< host time inside unback()
};

class paged_segments {
 public:
  /// Throws logic_error for a negative slack or a reserve that is not a multiple of the
  /// granularity, cuda_error when the device has no virtual memory management, out_of_memory
  /// when the address space cannot be reserved.
  explicit paged_segments(paged_segments_options options, runtime& rt = cuda_device());
  paged_segments(paged_segments const&)            = delete;
  paged_segments& operator=(paged_segments const&) = delete;
  /// Waits for the free pages' events, unmaps and releases everything, gives the range back.
  ~paged_segments();

  /// A new segment of `bytes` (rounded up to pages): address space, nothing backed.
  [[nodiscard]] void* reserve_segment(std::size_t bytes);
  /// Gives the segment at `ptr` back, with its pages. Reports (to stderr) and ignores a pointer
  /// that is no segment's; a page still live is reported and released all the same.
  void release_segment(void* ptr, std::size_t bytes) noexcept;
  /// Backs every page [ptr, ptr + bytes) touches, for a block that `stream` will use.
  void back(void const* ptr, std::size_t bytes, cudaStream_t stream);
  /// The block at [ptr, ptr + bytes) was freed on `stream`: pages no live block touches become
  /// free (oldest first in line to move). Reports and ignores a range outside the segments.
  void unback(void const* ptr, std::size_t bytes, cudaStream_t stream) noexcept;
  /// Unmaps and releases every free page (waiting for their work); returns the bytes released.
  std::size_t trim() noexcept;
  /// Whether `ptr` lies in this object's address range (a segment or not).
  [[nodiscard]] bool owns(void const* ptr) const noexcept;

  [[nodiscard]] paged_segments_stats stats() const;
  [[nodiscard]] int device() const noexcept { return device_; }
  /// Throws logic_error naming the broken invariant (see the top of this file).
  void check_invariants() const;

 private:
  static constexpr std::uint32_t none = 0xffffffffU;
  struct page {
    std::uint32_t count{};     ///< live blocks touching it
    std::uint32_t prev{none};  ///< free list links (mapped, count 0), oldest first
    std::uint32_t next{none};
    std::uint32_t event{none};  ///< the event its free recorded; none: nothing to wait for
    bool mapped{};
    bool pinned{};  ///< freed during a capture: never moved or trimmed
    vmm_handle handle{};
  };
  struct event_slot {
    cudaEvent_t event{};
    std::uint32_t pages{};  ///< free pages that wait on it
  };

  [[nodiscard]] char* address(std::uint32_t pg) const noexcept { return base_ + pg * granularity_; }
  /// Pages [first, last] of [ptr, ptr + bytes); logic_error when not inside one live segment.
  [[nodiscard]] std::pair<std::uint32_t, std::uint32_t> pages_of(void const* ptr,
                                                                 std::size_t bytes) const;
  struct taken_page {
    std::uint32_t page;
    bool pinned;
  };
  [[nodiscard]] taken_page take_free_in_place(std::uint32_t pg) noexcept;
  void map_page(std::uint32_t pg, std::vector<vmm_handle>& handles);
  void take_victims(std::size_t need, std::size_t live_after,
                    std::vector<vmm_handle>& out) noexcept;
  void undo_back(std::uint32_t first, std::uint32_t done, std::vector<std::uint32_t> const& mapped,
                 std::vector<taken_page> const& taken,
                 std::vector<vmm_handle> const& handles) noexcept;
  void grant(std::vector<std::uint32_t> const& mapped);
  void add_live() noexcept;
  void push_free(std::uint32_t pg, std::uint32_t event) noexcept;
  void link_free(std::uint32_t pg) noexcept;
  void unlink_free(std::uint32_t pg) noexcept;
  [[nodiscard]] bool wait_for(page& g) noexcept;
  void drop_event(std::uint32_t event) noexcept;
  [[nodiscard]] std::uint32_t record_event(cudaStream_t stream) noexcept;
  void unmap_and_release(std::uint32_t pg) noexcept;

  runtime* runtime_;
  int device_{};
  std::size_t granularity_{};
  double slack_{};
  std::size_t reserved_{};
  char* base_{};
  mutable std::mutex mutex_;
  std::vector<page> pages_;                      // by page index from base_
  std::map<std::size_t, std::size_t> holes_;     // free address space: first page -> page count
  std::map<std::size_t, std::size_t> segments_;  // live segments: first page -> page count
  std::vector<event_slot> events_;
  std::vector<std::uint32_t> spare_events_;  // slots no page waits on
  std::uint32_t free_head_{none}, free_tail_{none};
  std::size_t segment_pages_{};
  std::size_t mapped_pages_{};
  std::size_t movable_free_{};  // free pages in the free list (link_free / unlink_free count them)
  std::size_t pinned_free_{};   // free pages pinned by a capture, not in the list
  std::size_t live_pages_{};
  std::size_t peak_live_pages_{};
  std::uint64_t created_{}, moved_{}, waited_{}, released_{};
  std::uint64_t back_ns_{}, unback_ns_{};
};

}  // namespace gpumem::mr
