// gpumem/detail/allocation_table.hpp — the blocks a suballocator has handed out, by pointer (not
// API). It lets deallocate find a block's true size and chunk, and detect a double free or a
// foreign pointer instead of corrupting the free lists.
//
// Striped: 64 shards chosen by pointer hash, each with its own mutex, so threads freeing different
// blocks rarely meet (no global lock on the hot path).
//
// Invariant: bytes() == sum of recorded sizes (computed on demand; no shared counter to contend).
// Thread safety: all members are thread-safe.
#pragma once

#include <gpumem/detail/free_block.hpp>

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace gpumem::detail {

class allocation_table {
 public:
  void insert(free_block block)
  {
    auto& s = shard_of(block.ptr);
    std::lock_guard lock{s.mutex};
    s.blocks.emplace(block.ptr, record{block.size, block.chunk});
  }

  /// Removes and returns the block at `ptr`, or nothing when `ptr` is not handed out.
  std::optional<free_block> erase(void* ptr)
  {
    auto& s = shard_of(ptr);
    std::lock_guard lock{s.mutex};
    auto it = s.blocks.find(static_cast<char*>(ptr));
    if (it == s.blocks.end()) { return std::nullopt; }
    free_block const b{it->first, it->second.size, it->second.chunk};
    s.blocks.erase(it);
    return b;
  }

  /// Calls f(free_block) for every handed-out block (locks one shard at a time).
  template <class F>
  void for_each(F&& f) const
  {
    for (auto const& s : shards_) {
      std::lock_guard lock{s.mutex};
      for (auto const& [ptr, r] : s.blocks) { f(free_block{ptr, r.size, r.chunk}); }
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
  struct record {
    std::size_t size;
    std::uint32_t chunk;
  };
  struct alignas(64) shard {
    mutable std::mutex mutex;
    std::unordered_map<char*, record> blocks;
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
