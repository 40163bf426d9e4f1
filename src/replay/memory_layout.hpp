// The layout of a stack's memory at one moment (src/replay only): live blocks laid over the held
// chunks give the slack, the free bytes and the largest free range that replay.hpp defines.
#pragma once

#include <gpumem/replay/replay.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace gpumem::trace {

/// (address, bytes)
using address_range = std::pair<std::uintptr_t, std::size_t>;

/// The bytes a request really takes (replay_options::granted_bytes); empty: rounded up to 256 B.
using grant_fn = std::function<std::size_t(std::size_t)>;

/// The numbers a memory_state reports when the stack holds `held` bytes in `chunks`
/// (address-ordered) and the trace's live blocks are `blocks` (any order; sorted here). A block's
/// slack (internal) is what `granted` says it takes beyond its size, bounded by the next block
/// and the end of its chunk.
[[nodiscard]] memory_state lay_out(std::vector<address_range> blocks,
                                   std::vector<address_range> const& chunks, std::size_t held,
                                   std::size_t live, std::size_t live_blocks,
                                   grant_fn const& granted = {});

/// `chunks` (address-ordered) with ranges that touch merged into one: what a stack that maps
/// virtual memory can hand out in one piece (adjacent mappings are contiguous addresses). Chunks
/// from cudaMalloc are not joined: a pool cannot give one block across two of them.
[[nodiscard]] std::vector<address_range> join_adjacent(std::vector<address_range> chunks);

}  // namespace gpumem::trace
