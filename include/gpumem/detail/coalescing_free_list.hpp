// gpumem/detail/coalescing_free_list.hpp — free blocks of any size: best fit in O(log n), and
// coalescing of address-adjacent blocks of the same upstream chunk (not API).
//
// Three indexes over the same blocks: by start address and by end address (open-addressing hash
// maps: a freed block finds its neighbours for coalescing in O(1)), and by (size, address) (best
// fit is the smallest block that fits, lowest address among equals). The size index is split into
// size classes (exact below 8 KiB, then 4 per power of two), each an ordered set, with a bitmap of
// the non-empty classes: best fit searches the request's class, else takes the smallest block of
// the next non-empty class. A block is split from its high end, so the remainder keeps its
// address; size nodes are re-keyed in place through node handles, and one spare node is kept, so
// the hot path allocates nothing.
//
// Invariants (check_invariants() throws logic_error naming the broken one):
//   size_count_ == by_start_.size() == by_end_.size()       the indexes hold the same blocks
//   (size_count_ == sum of by_size_[c].size(); block b lies in by_size_[class_of(b.size)];
//   bit c of nonempty_ == !by_size_[c].empty())
//   by_end_[b.end()] == {b.end(), b.size, b.chunk} for every block b of by_start_
//   free_bytes_ == sum of block sizes
//   for adjacent blocks a < b: a.end() <= b.ptr               (no overlap)
//   and !(a.end() == b.ptr && a.chunk == b.chunk)             (fully coalesced)
// Thread safety: none; the owner locks.
#pragma once

#include <gpumem/detail/allocation_table.hpp>
#include <gpumem/detail/free_block.hpp>

#include <array>
#include <cstdint>
#include <set>
#include <utility>

namespace gpumem::detail {

class coalescing_free_list {
 public:
  coalescing_free_list() = default;
  /// Copies the blocks (not the spare node).
  coalescing_free_list(coalescing_free_list const& other)
      : by_start_{other.by_start_},
        by_end_{other.by_end_},
        by_size_{other.by_size_},
        nonempty_{other.nonempty_},
        size_count_{other.size_count_},
        free_bytes_{other.free_bytes_}
  {
  }
  coalescing_free_list(coalescing_free_list&&) noexcept            = default;
  coalescing_free_list& operator=(coalescing_free_list const&)     = delete;
  coalescing_free_list& operator=(coalescing_free_list&&) noexcept = default;
  ~coalescing_free_list()                                          = default;

  /// Removes and returns a block of exactly `size` bytes cut from the best-fitting free block, or
  /// an invalid block when none is large enough.
  free_block take(std::size_t size);
  /// Adds a block, merging it with free neighbours of the same chunk.
  void insert(free_block block);
  /// A fresh upstream chunk becomes one free block.
  void insert_chunk(free_block chunk) { insert(chunk); }
  /// Moves every block of `other` here (coalescing); `other` is left empty.
  void merge(coalescing_free_list& other);

  [[nodiscard]] bool empty() const noexcept { return size_count_ == 0; }
  [[nodiscard]] free_stats stats() const noexcept;
  /// Calls f(free_block) for every block, in no particular order.
  template <class F>
  void for_each(F&& f) const
  {
    by_start_.for_each([&](free_block const& b) { f(b); });
  }
  void clear() noexcept;
  void check_invariants() const;

 private:
  using size_key                       = std::pair<std::size_t, char*>;
  using size_set                       = std::set<size_key>;
  using size_node                      = size_set::node_type;
  static constexpr std::size_t classes = 256;

  /// The size class of `size`: monotonic, < classes.
  [[nodiscard]] static std::size_t class_of(std::size_t size) noexcept;
  /// The first non-empty class >= c, or classes.
  [[nodiscard]] std::size_t next_nonempty(std::size_t c) const noexcept;
  void add_size(size_node node);
  size_node remove_size(size_set::const_iterator it) noexcept;

  /// Replaces the size key of a block (no allocation: the node is re-keyed).
  void rekey_size(std::size_t old_size, char* old_ptr, std::size_t new_size, char* new_ptr);
  /// Sets the size of the block starting at `ptr` in both hash indexes (its end moves).
  void resize(char* ptr, std::size_t old_size, std::size_t new_size) noexcept;
  /// Removes a block from all indexes.
  void erase(free_block b) noexcept;
  void emplace(free_block block);

  block_map by_start_;  // block start -> block
  block_map by_end_;    // block end -> {end, size, chunk}
  std::array<size_set, classes> by_size_;
  std::array<std::uint64_t, classes / 64> nonempty_{};  // bit c: by_size_[c] is not empty
  std::size_t size_count_{};                            // == number of blocks
  std::size_t free_bytes_{};                            // == sum of block sizes
  size_node spare_size_;                                // an unused node (not a block)
};

}  // namespace gpumem::detail
