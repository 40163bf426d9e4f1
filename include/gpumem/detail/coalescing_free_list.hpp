// gpumem/detail/coalescing_free_list.hpp — free blocks of any size: best fit in O(log n), and
// coalescing of address-adjacent blocks of the same upstream chunk (not API).
//
// Each free block is a record (records_, recycled through free_records_). Three indexes name the
// records: by start address and by end address (open-addressing maps: a freed block finds its
// neighbours for coalescing in O(1)), and by (size, address), split into size classes (exact below
// 8 KiB, then 4 per power of two), each a size_index (a flat B+ tree; with a few blocks, one sorted
// node), with a bitmap of the non-empty classes: best fit is the smallest block that fits, lowest
// address among equals: the request's class's lower bound, else the next non-empty class's first
// block. A block is split from its high end, so the remainder keeps its address and record: only
// its end entry moves and its size key is rewritten (in place when the order allows). Once the
// list has held its most blocks, the hot path allocates nothing.
//
// Invariants (check_invariants() throws logic_error naming the broken one):
//   size_count_ == sum of by_size_[c].size() == by_start_.size() == by_end_.size()
//               == records_.size() - free_records_.size()           (the indexes hold the same
//               blocks)
//   entry (s, p) lies in by_size_[class_of(s)]; bit c of nonempty_ == !by_size_[c].empty()
//   for every entry (s, p) -> r of by_size_: records_[r] == {p, s, chunk},
//   by_start_[p] == r and by_end_[p + s] == r
//   free_bytes_ == sum of block sizes
//   for adjacent blocks a < b: a.end() <= b.ptr               (no overlap)
//   and !(a.end() == b.ptr && a.chunk == b.chunk)             (fully coalesced)
// Thread safety: none; the owner locks.
#pragma once

#include <gpumem/detail/address_map.hpp>
#include <gpumem/detail/free_block.hpp>
#include <gpumem/detail/size_index.hpp>

#include <array>
#include <bit>
#include <cstdint>
#include <vector>

namespace gpumem::detail {

class coalescing_free_list {
 public:
  coalescing_free_list() = default;
  /// Copies the blocks (with room to recycle every record without allocating).
  coalescing_free_list(coalescing_free_list const& other)
      : records_{other.records_},
        free_records_{other.free_records_},
        by_start_{other.by_start_},
        by_end_{other.by_end_},
        by_size_{other.by_size_},
        nonempty_{other.nonempty_},
        size_count_{other.size_count_},
        free_bytes_{other.free_bytes_}
  {
    free_records_.reserve(records_.size());
  }
  coalescing_free_list(coalescing_free_list&&) noexcept            = default;
  coalescing_free_list& operator=(coalescing_free_list const&)     = delete;
  coalescing_free_list& operator=(coalescing_free_list&&) noexcept = default;
  ~coalescing_free_list()                                          = default;

  /// Removes and returns a block of exactly `size` bytes cut from the best-fitting free block, or
  /// an invalid block when none is large enough. May throw bad_alloc (nothing changes then).
  free_block take(std::size_t size);
  /// Adds a block, merging it with free neighbours of the same chunk. May throw bad_alloc (nothing
  /// changes then).
  void insert(free_block const& block);
  /// A fresh upstream chunk becomes one free block.
  void insert_chunk(free_block chunk) { insert(chunk); }
  /// The free block that ends at / starts at `at`, or an invalid block.
  [[nodiscard]] free_block ending_at(char const* at) const noexcept;
  [[nodiscard]] free_block starting_at(char const* at) const noexcept;
  /// Removes [ptr, ptr + n) from the free block `from` (a block of this list that contains it);
  /// what is left of `from` on either side stays free. May throw bad_alloc (nothing changes then).
  void carve(free_block const& from, char* ptr, std::size_t n);
  /// Moves every block of `other` here (coalescing); `other` is left empty.
  void merge(coalescing_free_list& other);

  [[nodiscard]] bool empty() const noexcept { return size_count_ == 0; }
  [[nodiscard]] std::size_t free_bytes() const noexcept { return free_bytes_; }
  [[nodiscard]] free_stats stats() const noexcept;
  /// Calls f(free_block) for every block, in increasing (size, address) order.
  template <class F>
  void for_each(F&& f) const
  {
    for (auto const& index : by_size_) {
      index.for_each([&](size_index::entry const& e) { f(records_[e.value]); });
    }
  }
  void clear() noexcept;
  void check_invariants() const;

 private:
  using record                             = std::uint32_t;  // an index into records_
  static constexpr std::size_t classes     = 256;
  static constexpr std::uint32_t no_record = UINT32_MAX;  // find_or: no block there

  /// The size class of `size`: monotonic, < classes.
  [[nodiscard]] static std::size_t class_of(std::size_t size) noexcept
  {
    auto const v = size >> 8;  // in units of 256 bytes (the pool's alignment)
    if (v < 32) { return v; }
    auto const e = static_cast<std::size_t>(std::bit_width(v)) - 1;  // 5 <= e <= 55
    return 32 + (e - 5) * 4 + ((v >> (e - 2)) & 3);                  // 4 classes per octave
  }
  /// The first non-empty class >= c, or classes.
  [[nodiscard]] std::size_t next_nonempty(std::size_t c) const noexcept;
  /// Adds (size, ptr) -> r to its class (room reserved there).
  void add_size(std::size_t size, char* ptr, record r) noexcept;
  /// Removes the size entry at `at` of class c.
  void remove_size(std::size_t c, size_index::cursor& at) noexcept;

  void absorb_next(record prev, free_block block, record next) noexcept;
  void extend_prev(record prev, free_block block) noexcept;
  void extend_next(free_block block, record next) noexcept;
  /// Makes room for one more block in every index, its size key in class c (may throw; nothing
  /// changes then).
  void reserve_one(std::size_t c);
  void emplace(free_block block) noexcept;
  /// Removes record r and its index entries (the inverse of emplace).
  void unlink(record r) noexcept;
  void release(record r) noexcept { free_records_.push_back(r); }  // capacity reserved
  /// Moves the size key of record r from (old_size, old_ptr) to its current size and address.
  void rekey_size(record r, std::size_t old_size, char* old_ptr) noexcept;
  /// The block of size entry e of class c, after checking that the indexes agree on it.
  [[nodiscard]] free_block check_entry(std::size_t c, size_index::entry const& e) const;

  std::vector<free_block> records_;          // record -> block (unused records are stale)
  std::vector<record> free_records_;         // unused records; capacity >= records_.size()
  address_map<std::uint32_t> by_start_;      // block start -> record
  address_map<std::uint32_t> by_end_;        // block end -> record
  std::array<size_index, classes> by_size_;  // (size, start) -> record, by class
  std::array<std::uint64_t, classes / 64> nonempty_{};  // bit c: by_size_[c] is not empty
  std::size_t size_count_{};                            // == number of blocks
  std::size_t free_bytes_{};                            // == sum of block sizes
};

}  // namespace gpumem::detail
