// gpumem/detail/address_map.hpp — an open-addressing map from a 256-byte-aligned address to a
// 32-bit index: the coalescing free list's start and end indexes (not API).
//
// Linear probing, backward-shift deletion (no tombstones), load factor <= 1/2, Fibonacci hashing
// of the address (short probe runs for both scattered and consecutive addresses). Slots are 16
// bytes and live in one vector; nothing allocates unless an insert outgrows reserve().
//
// Invariant: count_ == number of occupied slots; every key lies in the probe run from its home
// slot (checked by the owner's tests through find()).
// Thread safety: none; the owner locks.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

namespace gpumem::detail {

class address_map {
 public:
  static constexpr std::uint32_t none = UINT32_MAX;

  /// The index stored at `key`, or `none`.
  [[nodiscard]] std::uint32_t find(char const* key) const noexcept
  {
    if (count_ == 0) { return none; }
    for (auto i = home(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) { return slots_[i].value; }
      if (slots_[i].key == nullptr) { return none; }
    }
  }
  /// Adds `key` (not present); grows when needed (may throw bad_alloc; nothing changes then).
  void insert(char* key, std::uint32_t value)
  {
    if ((count_ + 1) * 2 > slots_.size()) { grow(); }
    insert_unchecked(key, value);
  }
  /// Adds `key` after an erase or reserve made room: never allocates.
  void insert_unchecked(char* key, std::uint32_t value) noexcept
  {
    auto i = home(key);
    while (slots_[i].key != nullptr) { i = (i + 1) & mask_; }
    slots_[i] = slot{key, value};
    ++count_;
  }
  /// Replaces the index stored at `key` (present).
  void assign(char const* key, std::uint32_t value) noexcept
  {
    auto i = home(key);
    while (slots_[i].key != key) { i = (i + 1) & mask_; }
    slots_[i].value = value;
  }
  /// Removes `key` when present; returns whether it was.
  bool erase(char const* key) noexcept;
  /// Makes room for `n` keys, so that inserts up to that count allocate nothing (may throw).
  void reserve(std::size_t n);
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  void clear() noexcept
  {
    for (auto& s : slots_) { s = slot{}; }
    count_ = 0;
  }

 private:
  struct slot {
    char* key{};  // nullptr: empty
    std::uint32_t value{};
  };

  [[nodiscard]] std::size_t home(char const* key) const noexcept
  {
    auto const v = (reinterpret_cast<std::uintptr_t>(key) >> 8) * 0x9E3779B97F4A7C15ULL;
    return static_cast<std::size_t>(v >> shift_);
  }
  void grow() { rehash(slots_.empty() ? 64 : slots_.size() * 2); }
  void rehash(std::size_t slots);

  std::vector<slot> slots_;  // size: a power of two (or 0)
  std::size_t mask_{};       // == slots_.size() - 1
  unsigned shift_{64};       // == 64 - log2(slots_.size())
  std::size_t count_{};      // == occupied slots
};

inline bool address_map::erase(char const* key) noexcept
{
  if (count_ == 0) { return false; }
  auto i = home(key);
  while (slots_[i].key != key) {
    if (slots_[i].key == nullptr) { return false; }
    i = (i + 1) & mask_;
  }
  // Backward shift: later members of the probe run move into the hole when their home allows.
  for (auto j = (i + 1) & mask_; slots_[j].key != nullptr; j = (j + 1) & mask_) {
    auto const h = home(slots_[j].key);
    if (((j - h) & mask_) >= ((j - i) & mask_)) {  // h is not cyclically in (i, j]
      slots_[i] = slots_[j];
      i         = j;
    }
  }
  slots_[i] = slot{};
  --count_;
  return true;
}

inline void address_map::reserve(std::size_t n)
{
  auto slots = slots_.empty() ? std::size_t{64} : slots_.size();
  while (n * 2 > slots) { slots *= 2; }
  if (slots != slots_.size()) { rehash(slots); }
}

inline void address_map::rehash(std::size_t slots)
{
  std::vector<slot> fresh(slots);
  fresh.swap(slots_);
  mask_  = slots - 1;
  shift_ = 64U - static_cast<unsigned>(std::countr_zero(slots));
  count_ = 0;
  for (auto const& s : fresh) {
    if (s.key != nullptr) { insert_unchecked(s.key, s.value); }
  }
}

}  // namespace gpumem::detail
