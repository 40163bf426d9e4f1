// gpumem/detail/free_block.hpp — the unit the suballocators' free lists trade in (not API).
//
// A block is a byte range of device memory, described out of band (the memory itself is never
// touched: it may not be host-accessible). `chunk` names the upstream allocation the block lies in;
// blocks coalesce only within one chunk, because each chunk goes back upstream on its own.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpumem::detail {

struct free_block {
  char* ptr{};
  std::size_t size{};
  std::uint32_t chunk{};

  [[nodiscard]] char* end() const noexcept { return ptr + size; }
  [[nodiscard]] bool valid() const noexcept { return ptr != nullptr; }
};

/// Totals over free blocks, for out-of-memory diagnoses and invariants.
struct free_stats {
  std::size_t free_bytes{};
  std::size_t blocks{};
  std::size_t largest_bytes{};

  void add(free_stats const& other) noexcept
  {
    free_bytes += other.free_bytes;
    blocks += other.blocks;
    largest_bytes = other.largest_bytes > largest_bytes ? other.largest_bytes : largest_bytes;
  }
};

}  // namespace gpumem::detail
