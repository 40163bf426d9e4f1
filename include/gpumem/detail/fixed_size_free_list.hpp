// gpumem/detail/fixed_size_free_list.hpp — free blocks all of one size: O(1) take and insert, no
// coalescing (not API). Upstream chunks are cut into blocks when they arrive.
//
// Invariants (check_invariants() throws logic_error naming the broken one):
//   every block's size == block_size_
//   no block appears twice
// Thread safety: none; the owner locks.
#pragma once

#include <gpumem/detail/free_block.hpp>

#include <vector>

namespace gpumem::detail {

class fixed_size_free_list {
 public:
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

}  // namespace gpumem::detail
