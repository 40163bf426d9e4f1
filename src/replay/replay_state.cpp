// The layout of a stack's memory at one moment: live blocks over the held chunks.
#include "memory_layout.hpp"
#include "replayer.hpp"

#include <gpumem/align.hpp>

#include <algorithm>

namespace gpumem::trace {
namespace {

/// Walks one chunk: live blocks (address-ordered, inside it) leave slack and free gaps.
void walk_chunk(address_range chunk, std::vector<address_range> const& blocks, std::size_t& next,
                grant_fn const& granted, memory_state& s)
{
  auto const chunk_end  = chunk.first + chunk.second;
  std::uintptr_t cursor = chunk.first;
  auto gap              = [&](std::uintptr_t to) {
    if (to > cursor) { s.largest_free_bytes = std::max(s.largest_free_bytes, to - cursor); }
  };
  while (next < blocks.size() && blocks[next].first < chunk_end) {
    auto const [addr, size] = blocks[next++];
    if (addr < cursor) { continue; }  // overlapping report; ignore
    gap(addr);
    auto const end = addr + size;
    auto const following =
        next < blocks.size() ? std::min(blocks[next].first, chunk_end) : chunk_end;
    auto const taken =
        granted ? std::max(granted(size), size) : align_up(size, CUDA_ALLOCATION_ALIGNMENT);
    auto const slack =
        std::min<std::uintptr_t>(taken - size, following > end ? following - end : 0);
    s.internal_bytes += slack;
    cursor = end + slack;
  }
  gap(chunk_end);
}

}  // namespace

memory_state lay_out(std::vector<address_range> blocks, std::vector<address_range> const& chunks,
                     std::size_t held, std::size_t live, std::size_t live_blocks,
                     grant_fn const& granted)
{
  memory_state s;
  s.layout_known = true;
  s.held_bytes   = held;
  s.live_bytes   = live;
  s.live_blocks  = live_blocks;
  std::sort(blocks.begin(), blocks.end());
  std::size_t next = 0;
  for (auto const& chunk : chunks) {
    while (next < blocks.size() && blocks[next].first < chunk.first) { ++next; }
    walk_chunk(chunk, blocks, next, granted, s);
  }
  auto const used = s.live_bytes + s.internal_bytes;
  s.free_bytes    = s.held_bytes > used ? s.held_bytes - used : 0;
  return s;
}

std::vector<address_range> join_adjacent(std::vector<address_range> chunks)
{
  std::vector<address_range> out;
  out.reserve(chunks.size());
  for (auto const& c : chunks) {
    if (!out.empty() && out.back().first + out.back().second == c.first) {
      out.back().second += c.second;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

memory_state replayer::unlaid_state(std::size_t held) const
{
  memory_state s;
  s.held_bytes  = held;
  s.live_bytes  = live_;
  s.live_blocks = live_blocks_;
  s.free_bytes  = held > live_ ? held - live_ : 0;
  return s;
}

memory_state replayer::state() const
{
  if (footprint_ != nullptr) { return unlaid_state(held_now()); }  // bypasses the meter
  std::vector<address_range> blocks;
  blocks.reserve(live_blocks_);
  live_ranges(blocks);
  auto chunks = meter_->chunks();
  if (meter_->maps_memory()) { chunks = join_adjacent(std::move(chunks)); }
  return lay_out(std::move(blocks), chunks, held_now(), live_, live_blocks_,
                 options_.granted_bytes);
}

void replayer::live_ranges(std::vector<address_range>& out) const
{
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (occupied_[i] != 0 && slots_[i].ptr != nullptr) {
      out.emplace_back(reinterpret_cast<std::uintptr_t>(slots_[i].ptr), slots_[i].size);
    }
  }
}

}  // namespace gpumem::trace
