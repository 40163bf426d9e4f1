// gpumem/detail/coalescing_free_list.hpp — free blocks of any size: best fit in O(log n), and
// coalescing of address-adjacent blocks of the same upstream chunk (not API).
//
// Two indexes over the same blocks: by address (neighbours for coalescing) and by (size, address)
// (best fit: the smallest block that fits, lowest address among equals). A block is split from its
// high end, so the remainder keeps its address and no index node is allocated on the hot path:
// nodes are re-keyed in place through node handles.
//
// Invariants (check_invariants() throws logic_error naming the broken one):
//   by_size_.size() == by_addr_.size()                       the two indexes hold the same blocks
//   free_bytes_ == sum of block sizes
//   for adjacent blocks a < b: a.end() <= b.ptr               (no overlap)
//   and !(a.end() == b.ptr && a.chunk == b.chunk)             (fully coalesced)
// Thread safety: none; the owner locks.
#pragma once

#include <gpumem/detail/free_block.hpp>

#include <map>
#include <set>
#include <utility>

namespace gpumem::detail {

class coalescing_free_list {
 public:
  coalescing_free_list() = default;
  /// Copies the blocks (not the spare nodes).
  coalescing_free_list(coalescing_free_list const& other)
      : by_addr_{other.by_addr_}, by_size_{other.by_size_}, free_bytes_{other.free_bytes_}
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

  [[nodiscard]] bool empty() const noexcept { return by_addr_.empty(); }
  [[nodiscard]] free_stats stats() const noexcept;
  template <class F>
  void for_each(F&& f) const
  {
    for (auto const& [ptr, info] : by_addr_) { f(free_block{ptr, info.size, info.chunk}); }
  }
  void clear() noexcept;
  void check_invariants() const;

 private:
  struct info {
    std::size_t size;
    std::uint32_t chunk;
  };
  using size_key  = std::pair<std::size_t, char*>;
  using addr_node = std::map<char*, info>::node_type;
  using size_node = std::set<size_key>::node_type;

  void rekey_size(std::size_t old_size, char* old_ptr, std::size_t new_size, char* new_ptr);
  void erase(std::map<char*, info>::iterator it);
  /// Keeps one unused node of each index so that the next insert allocates nothing.
  void keep_spares(addr_node a, size_node s) noexcept;
  void emplace(free_block block);

  std::map<char*, info> by_addr_;
  std::set<size_key> by_size_;
  std::size_t free_bytes_{};  // == sum of block sizes
  addr_node spare_addr_;      // unused nodes (not blocks)
  size_node spare_size_;
};

}  // namespace gpumem::detail
