// gpumem/detail/arena/arena.hpp — one arena: the superblocks a thread (default streams) or a
// stream (other streams) suballocates small requests from. Not API.
//
// Small requests are served by address-ordered first fit over this arena's superblocks; when none
// fits, a superblock (superblock_bytes, or less when the global arena has no such range) is taken
// from the global arena. A superblock that becomes empty is kept while it is the arena's only empty
// one; a second empty superblock goes back to the global arena with a release event recorded on
// the arena's stream. Memory freed here is reused at once on the same stream (stream order).
//
// Thread safety: every member locks mutex_ (lock order: registry -> arena -> global).
// Invariants (check_invariants()):
//   held_bytes_ == sum of superblock sizes
//   empty_count_ == number of empty superblocks
//   every superblock keeps its own invariants (superblock.hpp)
#pragma once

#include <gpumem/detail/arena/global_arena.hpp>
#include <gpumem/detail/arena/superblock.hpp>

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <mutex>

namespace gpumem::detail::arena {

/// Size of a superblock taken from the global arena; allocations larger than this are large.
inline constexpr std::size_t superblock_bytes{std::size_t{1} << 20};

class arena {
 public:
  /// `stream`: the stream this arena serves; `release_event`: owned by the caller.
  arena(global_arena& global, cudaStream_t stream, cudaEvent_t release_event, char const* kind);

  /// A block of `bytes` (a multiple of 256, <= superblock_bytes); nullptr when out of memory.
  [[nodiscard]] void* allocate(std::size_t bytes);
  /// Frees a block of this arena. `may_release`: a superblock that becomes surplus-empty goes back
  /// to the global arena (only when called for this arena's own stream and thread).
  free_status deallocate(void* ptr, std::size_t bytes, bool may_release);
  /// Locks this arena (defragment and check_invariants hold every arena's lock at once).
  [[nodiscard]] std::unique_lock<std::mutex> lock() const { return std::unique_lock{mutex_}; }
  /// With lock() held and the device synchronized since: every empty superblock goes back to
  /// the global arena (no release event needed).
  void release_empty_locked();

  [[nodiscard]] stream_party party() const noexcept { return {this, stream_, release_event_}; }
  [[nodiscard]] std::size_t held_bytes() const;
  /// Free bytes inside the superblocks.
  [[nodiscard]] std::size_t free_bytes() const;
  [[nodiscard]] std::size_t superblock_count() const;
  [[nodiscard]] bool is_free(std::uintptr_t addr) const;

  /// With lock() held.
  void check_invariants_locked() const;
  /// Sum of superblock sizes, with lock() held.
  [[nodiscard]] std::size_t held_bytes_locked() const noexcept { return held_bytes_; }
  void dump(std::ostream& out) const;

 private:
  using superblock_map = std::map<std::uintptr_t, superblock>;
  superblock_map::iterator find(std::uintptr_t addr);
  [[gnu::cold, gnu::noinline]] void* grow_and_allocate(std::size_t bytes);
  void release(superblock_map::iterator it, bool event_on_stream);

  mutable std::mutex mutex_;
  global_arena* global_;
  cudaStream_t stream_;
  cudaEvent_t release_event_;
  char const* kind_;
  superblock_map superblocks_;  // by base address
  std::size_t held_bytes_{};
  std::size_t empty_count_{};
};

}  // namespace gpumem::detail::arena
