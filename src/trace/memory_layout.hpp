// The layout of a stack's memory at one moment (src/trace only): live blocks laid over the held
// chunks give the slack, the free bytes and the largest free range that replay.hpp defines.
#pragma once

#include <gpumem/trace/replay.hpp>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace gpumem::trace {

/// (address, bytes)
using address_range = std::pair<std::uintptr_t, std::size_t>;

/// The numbers a memory_state reports when the stack holds `held` bytes in `chunks`
/// (address-ordered) and the trace's live blocks are `blocks` (any order; sorted here).
[[nodiscard]] memory_state lay_out(std::vector<address_range> blocks,
                                   std::vector<address_range> const& chunks, std::size_t held,
                                   std::size_t live, std::size_t live_blocks);

}  // namespace gpumem::trace
