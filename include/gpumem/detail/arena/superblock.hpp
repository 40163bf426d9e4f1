// gpumem/detail/arena/superblock.hpp — one contiguous range lent by the global arena to an arena,
// suballocated with address-ordered first fit and coalescing on free. Not API.
//
// Bookkeeping only (addresses as integers): the managed memory is never touched.
// Thread safety: none; the owning arena's mutex guards every call.
// Invariants (check_invariants() throws logic_error naming the broken one):
//   free_bytes_ + live_bytes_ == size_
//   free_bytes_ == sum of free_ sizes,  live_bytes_ == sum of live_ sizes
//   free_ blocks lie inside [base_, base_ + size_), are disjoint and never adjacent (coalesced)
//   live_ blocks lie inside the range and overlap no free block
#pragma once

#include <gpumem/detail/arena/address_ranges.hpp>

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <unordered_map>

namespace gpumem::detail::arena {

/// What a free request found.
enum class free_status {
  freed,        ///< the block was live and is free now
  wrong_size,   ///< the block was live but with another size; it is freed with its own size
  double_free,  ///< the address lies in a block that is already free: nothing changed
  not_found,    ///< the address is not a live block here: nothing changed
};

class superblock {
 public:
  superblock(std::uintptr_t base, std::size_t size);

  [[nodiscard]] std::uintptr_t base() const noexcept { return base_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool contains(std::uintptr_t addr) const noexcept
  {
    return addr >= base_ && addr - base_ < size_;
  }
  /// True when no block is live: the whole range is one free block.
  [[nodiscard]] bool empty() const noexcept { return live_bytes_ == 0; }
  [[nodiscard]] std::size_t free_bytes() const noexcept { return free_bytes_; }
  [[nodiscard]] std::size_t live_bytes() const noexcept { return live_bytes_; }
  [[nodiscard]] std::size_t free_block_count() const noexcept { return free_.size(); }
  [[nodiscard]] std::size_t live_block_count() const noexcept { return live_.size(); }
  [[nodiscard]] std::size_t largest_free() const noexcept;

  /// First fit in address order; 0 when no free block holds `bytes`.
  [[nodiscard]] std::uintptr_t allocate(std::size_t bytes);
  /// Frees the live block at `addr` and coalesces it with its free neighbours.
  free_status deallocate(std::uintptr_t addr, std::size_t bytes);
  /// True when `addr` lies inside a free block (a second free of it is a double free).
  [[nodiscard]] bool is_free(std::uintptr_t addr) const;

  void check_invariants() const;
  /// One line for the superblock, then one per free block.
  void dump(std::ostream& out) const;

 private:
  void insert_free(std::uintptr_t addr, std::size_t bytes);

  std::uintptr_t base_;
  std::size_t size_;
  address_ranges free_;                                   // address -> bytes, address order
  std::unordered_map<std::uintptr_t, std::size_t> live_;  // address -> bytes
  std::size_t free_bytes_{};
  std::size_t live_bytes_{};
};

}  // namespace gpumem::detail::arena
