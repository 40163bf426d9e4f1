// gpumem/detail/fixed_size_free_list.hpp — free blocks all of one size: O(1) take and insert, no
// coalescing (not API). Upstream chunks are cut into blocks when they arrive. How the
// stream-ordered core steals from such a list is its own type, same_size_steal (below).
//
// Invariants (check_invariants() throws logic_error naming the broken one):
//   every block's size == block_size_
//   no block appears twice
// Thread safety: none; the owner locks.
#pragma once

#include <gpumem/detail/free_block.hpp>

#include <new>
#include <vector>

namespace gpumem::detail {

class same_size_steal;

class fixed_size_free_list {
 public:
  /// How the stream-ordered core steals from another stream's list of this type.
  using steal_policy = same_size_steal;

  explicit fixed_size_free_list(std::size_t block_size) noexcept : block_size_{block_size} {}

  /// A block (of block_size() bytes; `size` must not exceed it), or an invalid block when empty.
  free_block take(std::size_t size);
  void insert(free_block block) { blocks_.push_back(block); }
  /// Cuts a fresh upstream chunk into blocks; a tail shorter than a block is not used.
  void insert_chunk(free_block chunk);
  void merge(fixed_size_free_list& other);
  /// Moves the more recently freed half of the blocks (rounded down) into `dst`, which must be
  /// empty. Throws bad_alloc before moving anything when `dst` cannot hold them.
  void give_half(fixed_size_free_list& dst);

  [[nodiscard]] std::size_t block_size() const noexcept { return block_size_; }
  [[nodiscard]] bool empty() const noexcept { return blocks_.empty(); }
  [[nodiscard]] std::size_t count() const noexcept { return blocks_.size(); }
  [[nodiscard]] free_stats stats() const noexcept;
  template <class F>
  void for_each(F&& f) const
  {
    for (auto const& b : blocks_) { f(b); }
  }
  void clear() noexcept { blocks_.clear(); }
  void check_invariants() const;

 private:
  std::size_t block_size_;
  std::vector<free_block> blocks_;  // a stack: the most recently freed block is reused first
};

/// A steal from another stream's list of same-size blocks (fixed_size; docs/design.md,
/// "binning>pool at 16 threads"). The one event that orders the taker after the donor's frees
/// covers every block the donor holds, so a steal takes half of them along with the one asked
/// for: a thread that runs dry pays one event for many blocks instead of one per block. A donor
/// with fewer than min_donor_blocks keeps them (taking a stream's last blocks would leave it as
/// short as the taker), so the taker grows before it reclaims (grows_before_reclaim).
/// The core calls, under the donor's lock: donor_keeps, then (once ordered after the donor)
/// take_extra; after the search, deliver_to the taker's list when has_extra.
class same_size_steal {
 public:
  static constexpr std::size_t min_donor_blocks = 4;
  static constexpr bool grows_before_reclaim    = true;

  explicit same_size_steal(fixed_size_free_list const& prototype) : extra_{prototype} {}

  /// True when `donor` holds too few blocks to give any.
  [[nodiscard]] static bool donor_keeps(fixed_size_free_list const& donor) noexcept
  {
    return donor.count() < min_donor_blocks;
  }
  /// Half of `donor`'s remaining blocks come along (none when host memory is short).
  void take_extra(fixed_size_free_list& donor) noexcept
  {
    try {
      donor.give_half(extra_);
    } catch (std::bad_alloc const&) {  // NOLINT(bugprone-empty-catch): the one block only
    }
  }
  [[nodiscard]] bool has_extra() const noexcept { return !extra_.empty(); }
  /// Moves the blocks taken along into `list`. May throw bad_alloc (nothing moves then).
  void deliver_to(fixed_size_free_list& list) { list.merge(extra_); }

 private:
  fixed_size_free_list extra_;  // the blocks taken along, all of the donor's block size
};

}  // namespace gpumem::detail
