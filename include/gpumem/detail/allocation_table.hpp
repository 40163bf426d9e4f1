// gpumem/detail/allocation_table.hpp — the blocks a suballocator has handed out, by pointer (not
// API). It lets deallocate find a block's true size and chunk, and detect a double free or a
// foreign pointer instead of corrupting the free lists.
//
// Striped: 64 shards chosen by pointer hash, each with its own lock (a spin_mutex: the critical
// section is one probe), so threads freeing different blocks rarely meet (no global lock on the
// hot path).
//
// Invariant: bytes() == sum of recorded sizes (computed on demand; no shared counter to contend).
// Thread safety: all members are thread-safe.
#pragma once

#include <gpumem/detail/free_block.hpp>
#include <gpumem/detail/spin_mutex.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace gpumem::detail {

/// Open-addressing map char* -> (size, chunk): linear probing, backward-shift deletion, no node
/// allocation per insert. Load factor <= 1/2 (short probe runs). Not thread-safe (a shard's mutex
/// guards it).
class block_map {
 public:
  void insert(free_block const& b);
  std::optional<free_block> erase(char* key);
  /// The entry at `key`, or nullptr; valid until the next insert or erase.
  [[nodiscard]] free_block const* find(char const* key) const noexcept;
  [[nodiscard]] free_block* find(char const* key) noexcept
  {
    return const_cast<free_block*>(std::as_const(*this).find(key));
  }
  /// Makes room for `n` entries, so that inserts up to that count allocate nothing (may throw).
  void reserve(std::size_t n);
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  template <class F>
  void for_each(F&& f) const
  {
    for (auto const& s : slots_) {
      if (s.ptr != nullptr) { f(s); }
    }
  }
  void clear() noexcept
  {
    slots_.clear();
    count_ = 0;
  }

 private:
  [[nodiscard]] std::size_t home(char const* key) const noexcept
  {
    // Multiplicative hashing, top bits. The multiplier differs from shard_of's, whose top bits are
    // the same for every key of a shard.
    auto const v = (reinterpret_cast<std::uintptr_t>(key) >> 8) * 0xBF58476D1CE4E5B9ULL;
    return static_cast<std::size_t>(v >> shift_);
  }
  void grow(std::size_t slots);

  std::vector<free_block> slots_;  // ptr == nullptr: empty; size is a power of two (or 0)
  unsigned shift_{64};             // == 64 - log2(slots_.size())
  std::size_t count_{};            // == number of non-empty slots
};

// Inline: both are on every allocate / deallocate.
inline void block_map::insert(free_block const& b)
{
  if ((count_ + 1) * 2 > slots_.size()) { grow(std::max<std::size_t>(64, slots_.size() * 2)); }
  auto const mask = slots_.size() - 1;
  auto i          = home(b.ptr);
  while (slots_[i].ptr != nullptr) { i = (i + 1) & mask; }
  slots_[i].ptr   = b.ptr;  // field by field: the caller wrote b so (store forwarding)
  slots_[i].size  = b.size;
  slots_[i].chunk = b.chunk;
  ++count_;
}

inline std::optional<free_block> block_map::erase(char* key)
{
  if (slots_.empty()) { return std::nullopt; }
  auto const mask = slots_.size() - 1;
  auto i          = home(key);
  while (slots_[i].ptr != key) {
    if (slots_[i].ptr == nullptr) { return std::nullopt; }
    i = (i + 1) & mask;
  }
  auto const found = slots_[i];
  // Backward shift: move later members of the probe run into the hole when their home allows.
  for (auto j = (i + 1) & mask; slots_[j].ptr != nullptr; j = (j + 1) & mask) {
    auto const h       = home(slots_[j].ptr);
    bool const movable = i <= j ? (h <= i || h > j) : (h <= i && h > j);
    if (movable) {
      slots_[i] = slots_[j];
      i         = j;
    }
  }
  slots_[i] = free_block{};
  --count_;
  return found;
}

class allocation_table {
 public:
  void insert(free_block const& block)
  {
    auto& s = shard_of(block.ptr);
    std::lock_guard lock{s.mutex};
    s.blocks.insert(block);
  }

  /// Removes and returns the block at `ptr`, or nothing when `ptr` is not handed out.
  std::optional<free_block> erase(void* ptr)
  {
    auto& s = shard_of(ptr);
    std::lock_guard lock{s.mutex};
    return s.blocks.erase(static_cast<char*>(ptr));
  }

  /// Calls f(free_block) for every handed-out block (locks one shard at a time).
  template <class F>
  void for_each(F&& f) const
  {
    for (auto const& s : shards_) {
      std::lock_guard lock{s.mutex};
      s.blocks.for_each(f);
    }
  }

  void clear() noexcept
  {
    for (auto& s : shards_) {
      std::lock_guard lock{s.mutex};
      s.blocks.clear();
    }
  }

 private:
  struct alignas(64) shard {
    mutable spin_mutex mutex;
    block_map blocks;
  };
  static constexpr std::size_t shard_bits = 6;

  shard& shard_of(void const* ptr) noexcept
  {
    auto v = reinterpret_cast<std::uintptr_t>(ptr) >> 8;  // blocks are 256-byte aligned
    v *= 0x9E3779B97F4A7C15ULL;                           // Fibonacci hashing
    return shards_[v >> (64 - shard_bits)];
  }

  std::array<shard, std::size_t{1} << shard_bits> shards_;
};

}  // namespace gpumem::detail
