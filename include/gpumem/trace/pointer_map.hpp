// gpumem/trace/pointer_map.hpp — a map from a traced pointer to what the replay keeps for it: open
// addressing, linear probing, backward-shift deletion (no tombstones), so that lookups stay a cache
// line or two at tens of millions of events. Not API.
//
// Invariants: size() == number of occupied slots; size() * 2 <= capacity (grows at half full);
// every key sits at or after its home slot with no empty slot in between.
// Thread safety: none.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpumem::trace {

struct live_block {
  void* ptr{};
  std::size_t size{};
  cudaStream_t stream{};
};

/// `Value`: what a traced pointer maps to (default: the replayed block).
template <class Value = live_block>
class pointer_map {
 public:
  static constexpr std::uint64_t empty_key = UINT64_MAX;

  explicit pointer_map(std::size_t capacity_pow2 = 1024) { reset(capacity_pow2); }

  [[nodiscard]] std::size_t size() const noexcept { return count_; }

  [[nodiscard]] Value* find(std::uint64_t key) noexcept
  {
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) { return &slots_[i].value; }
      if (slots_[i].key == empty_key) { return nullptr; }
    }
  }

  /// Inserts; the key must not be present (and must not be empty_key).
  void insert(std::uint64_t key, Value const& value)
  {
    if ((count_ + 1) * 2 > slots_.size()) { grow(); }
    std::size_t i = home(key);
    while (slots_[i].key != empty_key) { i = (i + 1) & mask_; }
    slots_[i] = {key, value};
    ++count_;
  }

  /// Removes `key` into `out`; false when absent.
  bool erase(std::uint64_t key, Value& out) noexcept
  {
    std::size_t i = home(key);
    for (; slots_[i].key != key; i = (i + 1) & mask_) {
      if (slots_[i].key == empty_key) { return false; }
    }
    out = slots_[i].value;
    shift_back(i);
    --count_;
    return true;
  }

  template <class F>
  void for_each(F&& f) const
  {
    for (auto const& s : slots_) {
      if (s.key != empty_key) { f(s.key, s.value); }
    }
  }

  void clear() { reset(1024); }

 private:
  struct slot {
    std::uint64_t key;
    Value value;
  };

  [[nodiscard]] std::size_t home(std::uint64_t key) const noexcept
  {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ULL) >> shift_);
  }

  void shift_back(std::size_t hole) noexcept
  {
    for (std::size_t j = (hole + 1) & mask_; slots_[j].key != empty_key; j = (j + 1) & mask_) {
      std::size_t const h = home(slots_[j].key);
      // Move j into the hole when its home is not in (hole, j] (cyclically).
      bool const stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
      if (!stays) {
        slots_[hole] = slots_[j];
        hole         = j;
      }
    }
    slots_[hole].key = empty_key;
  }

  void reset(std::size_t capacity)
  {
    slots_.assign(capacity, slot{empty_key, {}});
    mask_  = capacity - 1;
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(capacity));
    count_ = 0;
  }

  void grow()
  {
    auto old = std::move(slots_);
    reset(old.size() * 2);
    for (auto const& s : old) {
      if (s.key != empty_key) { insert(s.key, s.value); }
    }
  }

  std::vector<slot> slots_;
  std::size_t mask_{};
  unsigned shift_{};
  std::size_t count_{};
};

}  // namespace gpumem::trace
