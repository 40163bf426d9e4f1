// gpumem/detail/address_map.hpp — an open-addressing map from a 256-byte-aligned address to a small
// value (not API): the coalescing free list's start and end indexes (address -> record index) and
// the allocation table's shards (address -> size and chunk of a handed-out block).
//
// Linear probing, backward-shift deletion (no tombstones), load factor <= 1/2, multiplicative
// hashing of the address (short probe runs for both scattered and consecutive addresses; an owner
// that already picks among maps by the same hash's top bits chooses another `Multiplier`). Slots
// live in one vector; nothing allocates unless an insert outgrows reserve().
//
// Invariant: count_ == number of occupied slots; every key lies in the probe run from its home
// slot (checked by the owners' tests through find()).
// Thread safety: none; the owner locks.
#pragma once

#include <bit>
#include <cstdint>
#include <utility>
#include <vector>

namespace gpumem::detail {

template <class Value, std::uint64_t Multiplier = 0x9E3779B97F4A7C15ULL>
class address_map {
 public:
  /// The value stored at `key`, or nullptr; valid until the next insert or erase.
  [[nodiscard]] Value const* find(char const* key) const noexcept
  {
    if (count_ == 0) { return nullptr; }
    for (auto i = home(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) { return &slots_[i].value; }
      if (slots_[i].key == nullptr) { return nullptr; }
    }
  }
  /// The value stored at `key`, mutable in place, or nullptr; valid until the next insert or erase.
  [[nodiscard]] Value* find(char const* key) noexcept
  {
    return const_cast<Value*>(std::as_const(*this).find(key));
  }
  /// The value stored at `key`, or `missing`.
  [[nodiscard]] Value find_or(char const* key, Value missing) const noexcept
  {
    auto const* v = find(key);
    return v != nullptr ? *v : missing;
  }
  /// Adds `key` (not present); grows when needed (may throw bad_alloc; nothing changes then).
  void insert(char* key, Value const& value)
  {
    if ((count_ + 1) * 2 > slots_.size()) { grow(); }
    insert_unchecked(key, value);
  }
  /// Adds `key` after an erase or reserve made room: never allocates.
  void insert_unchecked(char* key, Value const& value) noexcept
  {
    auto i = home(key);
    while (slots_[i].key != nullptr) { i = (i + 1) & mask_; }
    slots_[i].key   = key;
    slots_[i].value = value;
    ++count_;
  }
  /// Replaces the value stored at `key` (present).
  void assign(char const* key, Value const& value) noexcept
  {
    auto i = home(key);
    while (slots_[i].key != key) { i = (i + 1) & mask_; }
    slots_[i].value = value;
  }
  /// Removes `key` when present, its value into `*out` when given; returns whether it was.
  bool erase(char const* key, Value* out = nullptr) noexcept;
  /// Makes room for `n` keys, so that inserts up to that count allocate nothing (may throw).
  void reserve(std::size_t n);
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  /// Calls f(key, value) for every entry, in no particular order.
  template <class F>
  void for_each(F&& f) const
  {
    for (auto const& s : slots_) {
      if (s.key != nullptr) { f(s.key, s.value); }
    }
  }
  void clear() noexcept
  {
    for (auto& s : slots_) { s = slot{}; }
    count_ = 0;
  }

 private:
  struct slot {
    char* key{};  // nullptr: empty
    Value value{};
  };

  [[nodiscard]] std::size_t home(char const* key) const noexcept
  {
    auto const v = (reinterpret_cast<std::uintptr_t>(key) >> 8) * Multiplier;
    return static_cast<std::size_t>(v >> shift_);
  }
  void grow() { rehash(slots_.empty() ? 64 : slots_.size() * 2); }
  void rehash(std::size_t slots);

  std::vector<slot> slots_;  // size: a power of two (or 0)
  std::size_t mask_{};       // == slots_.size() - 1
  unsigned shift_{64};       // == 64 - log2(slots_.size())
  std::size_t count_{};      // == occupied slots
};

template <class Value, std::uint64_t Multiplier>
bool address_map<Value, Multiplier>::erase(char const* key, Value* out) noexcept
{
  if (count_ == 0) { return false; }
  auto i = home(key);
  while (slots_[i].key != key) {
    if (slots_[i].key == nullptr) { return false; }
    i = (i + 1) & mask_;
  }
  if (out != nullptr) { *out = slots_[i].value; }
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

template <class Value, std::uint64_t Multiplier>
void address_map<Value, Multiplier>::reserve(std::size_t n)
{
  auto slots = slots_.empty() ? std::size_t{64} : slots_.size();
  while (n * 2 > slots) { slots *= 2; }
  if (slots != slots_.size()) { rehash(slots); }
}

template <class Value, std::uint64_t Multiplier>
void address_map<Value, Multiplier>::rehash(std::size_t slots)
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
