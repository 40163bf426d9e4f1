// gpumem/detail/thread_cache/local_cache.hpp — one thread's cache of freed blocks for one
// thread_cache_resource_adaptor (not API).
//
// Owned by the adaptor's cache_core; used by its owner thread only, except `inbox_` and
// `flush_requested_` (other threads post to them) and the counters (others read them).
//
// State: every block the cache owns, handed out ("live") or cached, is in `blocks_` (pointer ->
// block_entry). A cached block sits in exactly one bin: slot `entry.slot` (a stream), class
// `class_of(entry.block_units)`, and is reused only for a request on that same stream.
// Invariants (checked by cache_core::check_invariants at quiescent points):
//   bytes_cached == Σ over slots of slot.bytes == Σ over bins of the cached blocks' sizes;
//   bytes_cached <= credit <= the per-thread cap;
//   entry.cached <=> the block is in the bin its entry names.
// Hot path (try_allocate / try_deallocate): one hash probe, one bin push or pop; no lock, no
// shared read-modify-write, no runtime call, no heap allocation. Anything else returns "no" and
// the caller takes cache_core's slow path.
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/detail/address_map.hpp>
#include <gpumem/detail/thread_cache/size_classes.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

namespace gpumem::detail::thread_cache {

/// What a cache knows of a block it owns.
struct block_entry {
  std::uint32_t block_units{};    ///< the block's size as taken from upstream, in granules
  std::uint32_t request_units{};  ///< the size its current (or last) user asked for, in granules
  std::uint8_t slot{};            ///< the stream slot it is cached in, when cached
  bool cached{};                  ///< in a bin (true) or handed out (false)
};

/// A free posted to a block's owner by another thread (an intrusive lock-free MPSC list).
struct remote_free {
  remote_free* next{};
  char* ptr{};
  cudaStream_t stream{};
  std::uint32_t request_units{};
  bool forget{};  ///< the sender released the block upstream itself; the owner only forgets it
};

/// A counter written by one thread (no read-modify-write) and read by any.
class owner_counter {
 public:
  void add(std::uint64_t d) noexcept { v_.store(get() + d, std::memory_order_relaxed); }
  void sub(std::uint64_t d) noexcept { v_.store(get() - d, std::memory_order_relaxed); }
  void set(std::uint64_t v) noexcept { v_.store(v, std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t get() const noexcept { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> v_{};
};

inline constexpr std::size_t max_stream_slots = 4;

/// One stream's bins: a LIFO stack of cached blocks per class (the back is the hottest).
struct stream_slot {
  std::vector<std::vector<char*>> bins;
  std::size_t bytes{};  ///< == Σ sizes of the blocks in `bins`
};

class local_cache {
 public:
  local_cache(unsigned classes, std::uint64_t thread_serial) noexcept
      : classes_{classes}, thread_serial_{thread_serial}
  {
  }

  /// A cached block of at least `units` granules for `stream`, or nullptr.
  [[nodiscard]] char* try_allocate(std::uint64_t units, cudaStream_t stream) noexcept
  {
    int const slot = signalled() ? -1 : slot_of(stream);
    if (slot < 0) { return nullptr; }
    auto const c = class_of(units);
    auto& bins   = slots_[slot].bins;
    if (char* p = pop_fitting(bins[c], units, slot)) { return p; }
    return c + 1 < classes_ ? pop_fitting(bins[c + 1], units, slot) : nullptr;
  }

  /// Caches a live block of this cache freed with `units` granules on `stream`; false when that
  /// needs the slow path (not ours, already cached, wrong size, a new stream, no room or credit).
  [[nodiscard]] bool try_deallocate(char* p, std::uint64_t units, cudaStream_t stream) noexcept
  {
    auto* e = signalled() ? nullptr : blocks_.find(p);
    if (e == nullptr || e->cached || e->request_units != units) { return false; }
    int const slot = slot_of(stream);
    if (slot < 0) { return false; }
    auto const bytes = std::uint64_t{e->block_units} * granule_bytes;
    auto& bin        = slots_[slot].bins[class_of(e->block_units)];
    if (bin.size() == bin.capacity() || bytes_cached_.get() + bytes > credit_.get()) {
      return false;
    }
    e->cached = true;
    e->slot   = static_cast<std::uint8_t>(slot);
    bin.push_back(p);
    slots_[slot].bytes += bytes;
    bytes_cached_.add(bytes);
    return true;
  }

  /// True when another thread posted a free or asked for a flush.
  [[nodiscard]] bool signalled() const noexcept
  {
    return inbox_.load(std::memory_order_acquire) != nullptr ||
           flush_requested_.load(std::memory_order_relaxed);
  }

  /// The slot of `stream`, or -1.
  [[nodiscard]] int slot_of(cudaStream_t stream) const noexcept
  {
    for (unsigned i = 0; i < used_slots_; ++i) {
      if (streams_[i] == stream) { return static_cast<int>(i); }
    }
    return -1;
  }

 private:
  friend class cache_core;

  char* pop_fitting(std::vector<char*>& bin, std::uint64_t units, int slot) noexcept
  {
    if (bin.empty()) { return nullptr; }
    char* p = bin.back();
    auto* e = blocks_.find(p);
    if (e->block_units < units) { return nullptr; }
    bin.pop_back();
    e->cached        = false;
    e->request_units = static_cast<std::uint32_t>(units);
    auto const bytes = std::uint64_t{e->block_units} * granule_bytes;
    slots_[slot].bytes -= bytes;
    bytes_cached_.sub(bytes);
    hits_.add(1);
    return p;
  }

  unsigned const classes_;
  std::uint64_t const thread_serial_;
  address_map<block_entry> blocks_;  // every block owned: live and cached
  std::array<cudaStream_t, max_stream_slots> streams_{};
  std::array<stream_slot, max_stream_slots> slots_{};
  unsigned used_slots_{};
  unsigned next_victim_{};  // the slot a fifth stream replaces next

  // Written by the owner, read by anyone (statistics, invariants).
  owner_counter bytes_cached_;  // == Σ slots_[i].bytes
  owner_counter credit_;        // bytes of the global budget this cache holds; >= bytes_cached_
  owner_counter hits_;
  owner_counter misses_;
  owner_counter flushed_;  // blocks returned upstream

  // Written by other threads.
  alignas(64) std::atomic<remote_free*> inbox_{};
  std::atomic<bool> flush_requested_{};
};

}  // namespace gpumem::detail::thread_cache
