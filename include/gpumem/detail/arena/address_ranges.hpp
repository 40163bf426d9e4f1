// gpumem/detail/arena/address_ranges.hpp — free address ranges kept in address order (not API).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>

namespace gpumem::detail::arena {

/// Free ranges: start address -> bytes. Invariant: ranges never overlap or touch (touching ranges
/// are merged on insert).
using address_ranges = std::map<std::uintptr_t, std::size_t>;

/// Inserts [addr, addr + bytes) and merges it with the ranges it touches.
inline void insert_coalescing(address_ranges& ranges, std::uintptr_t addr, std::size_t bytes)
{
  auto next = ranges.lower_bound(addr);
  if (next != ranges.end() && addr + bytes == next->first) {
    bytes += next->second;
    next = ranges.erase(next);
  }
  if (next != ranges.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == addr) {
      prev->second += bytes;
      return;
    }
  }
  ranges.emplace_hint(next, addr, bytes);
}

}  // namespace gpumem::detail::arena
