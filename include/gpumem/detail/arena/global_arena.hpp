// gpumem/detail/arena/global_arena.hpp — the global arena: one range taken from upstream at
// construction, lent out as superblocks to arenas and directly for large allocations. Not API.
//
// Free ranges are kept in address order and coalesced; lending is address-ordered first fit.
// Stream rule: whoever returns memory records its arena's release event on the stream the memory
// was last used on; whoever takes memory next is ordered after every pending release event of
// another arena (stream_wait_event), or finds it already complete (event_query, then forgotten).
// When the release event cannot be recorded, the releasing stream is synchronized instead.
//
// Thread safety: every member locks mutex_ (lock order: registry -> arena -> global).
// Invariants (check_invariants()):
//   free_bytes_ + lent_bytes_ + large_bytes_ == size_
//   free_bytes_ == sum of free_ sizes; large_bytes_ == sum of large_ sizes
//   free_ ranges lie inside the arena, are disjoint and never adjacent (coalesced)
#pragma once

#include <gpumem/detail/arena/address_ranges.hpp>

#include <gpumem/detail/arena/superblock.hpp>
#include <gpumem/detail/runtime.hpp>

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace gpumem::detail::arena {

/// Who takes or returns memory: an arena's identity, its stream and its release event.
struct stream_party {
  void const* id{};
  cudaStream_t stream{};
  cudaEvent_t release_event{};
};

/// A range lent out; size 0 means nothing was available.
struct lent_range {
  std::uintptr_t base{};
  std::size_t size{};
};

class global_arena {
 public:
  global_arena(void* base, std::size_t size, runtime& rt);

  /// A range of `want` bytes (or, when none is that large, of at least `need` bytes), first fit.
  [[nodiscard]] lent_range acquire(std::size_t need, std::size_t want, stream_party const& taker);
  /// Takes back a range lent by acquire(); `event_on_stream` records the releaser's event first.
  void release(lent_range range, stream_party const& releaser, bool event_on_stream);

  /// A large allocation straight from the global arena; nullptr when none fits.
  [[nodiscard]] void* allocate_large(std::size_t bytes, stream_party const& taker);
  /// Frees a large allocation; not_found / double_free leave everything unchanged.
  free_status deallocate_large(void* ptr, std::size_t bytes, stream_party const& releaser);
  /// True when `ptr` is a live large allocation.
  [[nodiscard]] bool owns_large(void* ptr) const;

  [[nodiscard]] std::uintptr_t base() const noexcept { return base_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t free_bytes() const;
  [[nodiscard]] std::size_t largest_free() const;
  [[nodiscard]] std::size_t lent_bytes() const;
  [[nodiscard]] bool is_free(std::uintptr_t addr) const;

  /// `arena_held_bytes`: sum of the arenas' superblock sizes, which must equal lent_bytes_.
  void check_invariants(std::size_t arena_held_bytes) const;
  void dump(std::ostream& out) const;

 private:
  std::uintptr_t take_first_fit(std::size_t need, std::size_t want, std::size_t& got);
  void give_back(std::uintptr_t addr, std::size_t bytes);
  void order_after_releases(stream_party const& taker);
  void note_release(stream_party const& releaser);
  [[nodiscard]] std::size_t largest_free_locked() const;

  mutable std::mutex mutex_;
  runtime* runtime_;
  std::uintptr_t base_;
  std::size_t size_;
  address_ranges free_;                                    // address -> bytes
  std::unordered_map<std::uintptr_t, std::size_t> large_;  // live large allocations
  std::vector<stream_party> pending_;                      // releases not known complete
  std::size_t free_bytes_{};
  std::size_t lent_bytes_{};
  std::size_t large_bytes_{};
};

}  // namespace gpumem::detail::arena
