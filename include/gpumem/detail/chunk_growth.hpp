// gpumem/detail/chunk_growth.hpp — the stream-ordered core's growth by chunks taken from an
// upstream resource (pool, fixed_size; not API).
//
// A growth asks the resource for a new chunk (Source::allocate_chunk: its growth policy, e.g. the
// pool's doubling), cuts the request from it directly (another thread cannot take it first) and
// gives the rest to the idle list. Blocks never coalesce across two chunks (they name their chunk).
// Chunks go back upstream (Source::deallocate_chunk) only in release(): the resource keeps what it
// took (lean == false).
//
// Invariants (check_invariants() throws logic_error naming the broken one):
//   chunks_[i].chunk == i
//   bytes_ == sum of chunk sizes
// Thread safety: everything but bytes() under the core's grow lock.
#pragma once

#include <gpumem/detail/free_block.hpp>
#include <gpumem/detail/invariant.hpp>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace gpumem::detail {

class chunk_growth {
 public:
  /// Memory stays taken until release(): a cache above the resource may keep blocks.
  static constexpr bool lean = false;

  /// The pool size: bytes taken from upstream (free and handed out). Any thread.
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_.load(); }
  /// The chunks, chunks()[i].chunk == i (what the blocks name).
  [[nodiscard]] std::vector<free_block> const& chunks() const noexcept { return chunks_; }

  /// Numbers and counts a chunk taken from upstream (the initial pool, or a growth); returns it
  /// numbered. May throw bad_alloc (nothing counted then).
  free_block adopt(free_block chunk)
  {
    chunk.chunk = static_cast<std::uint32_t>(chunks_.size());
    chunks_.push_back(chunk);
    bytes_ += chunk.size;
    return chunk;
  }

  /// A new chunk from `source`, the request of `size` cut from it; the rest goes to `idle` (the
  /// core's idle list: a mutex and a list). Throws what the source throws (nothing changes then).
  template <class Source, class Idle, class Placement>
  [[gnu::cold, gnu::noinline]] free_block grow(Source& source, Idle& idle, std::size_t size,
                                               Placement& /*new memory: no placement concern*/)
  {
    auto chunk = source.allocate_chunk(size);
    try {
      chunk = adopt(chunk);
    } catch (...) {
      source.deallocate_chunk(chunk);
      throw;
    }
    auto fresh = source.empty_list();
    fresh.insert_chunk(chunk);
    auto const block = fresh.take(size);
    std::lock_guard lock{idle.mutex};
    idle.list.merge(fresh);
    return block;
  }

  /// Returns every chunk upstream; the lists must hold none of their blocks any more.
  template <class Source>
  void release(Source& source) noexcept
  {
    for (auto const& c : chunks_) { source.deallocate_chunk(c); }
    chunks_.clear();
    bytes_ = 0;
  }

  template <class Source>
  void check_invariants(char const* resource, Source const& /*source*/,
                        std::vector<free_block> const& /*blocks*/) const
  {
    std::size_t sum{};
    for (std::size_t i = 0; i < chunks_.size(); ++i) {
      GPUMEM_INVARIANT(chunks_[i].chunk == i, resource,
                       format("chunk ", i, " is numbered ", chunks_[i].chunk));
      sum += chunks_[i].size;
    }
    GPUMEM_INVARIANT(bytes_ == sum, resource,
                     format("pool size ", bytes_.load(), " != sum of chunk sizes ", sum));
  }

 private:
  std::vector<free_block> chunks_;    // chunks_[i].chunk == i
  std::atomic<std::size_t> bytes_{};  // == sum of chunks_[i].size
};

}  // namespace gpumem::detail
