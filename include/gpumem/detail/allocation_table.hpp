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

#include <gpumem/detail/address_map.hpp>
#include <gpumem/detail/free_block.hpp>
#include <gpumem/detail/spin_mutex.hpp>

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>

namespace gpumem::detail {

class allocation_table {
 public:
  void insert(free_block const& block)
  {
    auto& s = shard_of(block.ptr);
    std::lock_guard lock{s.mutex};
    s.blocks.insert(block.ptr, {block.size, block.chunk});
  }

  /// Removes and returns the block at `ptr`, or nothing when `ptr` is not handed out.
  std::optional<free_block> erase(void* ptr)
  {
    auto& s = shard_of(ptr);
    handed_out b;
    {
      std::lock_guard lock{s.mutex};
      if (!s.blocks.erase(static_cast<char const*>(ptr), &b)) { return std::nullopt; }
    }
    return free_block{static_cast<char*>(ptr), b.size, b.chunk};
  }

  /// The size of the block handed out at `ptr`, or nothing when `ptr` is not handed out.
  [[nodiscard]] std::optional<std::size_t> size_of(void const* ptr) const noexcept
  {
    auto const& s = shard_of(ptr);
    std::lock_guard lock{s.mutex};
    auto const* b = s.blocks.find(static_cast<char const*>(ptr));
    return b == nullptr ? std::nullopt : std::optional<std::size_t>{b->size};
  }

  /// Calls f(free_block) for every handed-out block (locks one shard at a time).
  template <class F>
  void for_each(F&& f) const
  {
    for (auto const& s : shards_) {
      std::lock_guard lock{s.mutex};
      s.blocks.for_each([&](char* p, handed_out const& b) { f(free_block{p, b.size, b.chunk}); });
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
  struct handed_out {
    std::size_t size;
    std::uint32_t chunk;
  };
  struct alignas(64) shard {
    mutable spin_mutex mutex;
    // Another multiplier than shard_of's: its top bits are the same for every key of a shard.
    address_map<handed_out, 0xBF58476D1CE4E5B9ULL> blocks;
  };
  static constexpr std::size_t shard_bits = 6;

  static std::size_t shard_index(void const* ptr) noexcept
  {
    auto v = reinterpret_cast<std::uintptr_t>(ptr) >> 8;  // blocks are 256-byte aligned
    v *= 0x9E3779B97F4A7C15ULL;                           // Fibonacci hashing
    return v >> (64 - shard_bits);
  }
  shard& shard_of(void const* ptr) noexcept { return shards_[shard_index(ptr)]; }
  shard const& shard_of(void const* ptr) const noexcept { return shards_[shard_index(ptr)]; }

  std::array<shard, std::size_t{1} << shard_bits> shards_;
};

}  // namespace gpumem::detail
