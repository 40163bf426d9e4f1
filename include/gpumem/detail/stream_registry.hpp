// gpumem/detail/stream_registry.hpp — per-stream state of a stream-ordered resource, found without
// a global lock on the hot path (not API).
//
// Each resource owns one registry mapping a stream to a `State` (created on first use, alive until
// the registry dies, so references stay valid). Lookups go through a small thread-local cache keyed
// by (registry id, stream handle): 8 sets of 4, so that a thread using many resources at once
// (binning's bins, one registry each) still hits; a miss takes the registry mutex (slow path).
// Registry ids come from a process-wide counter and are never reused, so a stale cache entry of a
// dead registry never matches.
//
// Per-thread default streams: cudaStreamPerThread (and the null stream when the library is built
// for per-thread default streams) names a different stream on every host thread. Such a stream is
// keyed by (handle, thread serial) where the serial is unique for the life of the process, and its
// State remembers its owner thread: only that thread may record an event on it.
//
// Thread safety: get() and for_each() may be called from any thread.
#pragma once

#include <gpumem/cuda_stream_view.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace gpumem::detail {

/// A number unique to the calling thread for the life of the process (never 0).
[[nodiscard]] std::uint64_t this_thread_serial() noexcept;
/// A new registry id (never 0, never reused).
[[nodiscard]] std::uint64_t next_registry_id() noexcept;

/// Where a stream's State lives: the canonical handle, and the owner thread for per-thread streams.
struct stream_identity {
  cudaStream_t stream{};  ///< cudaStreamLegacy for the legacy default stream
  std::uint64_t owner{};  ///< this_thread_serial() of the owner; 0 for ordinary streams

  friend auto operator<=>(stream_identity const&, stream_identity const&) = default;
  /// The identity of `stream` as seen from the calling thread.
  [[nodiscard]] static stream_identity of(cudaStream_t stream) noexcept;
  /// True when the calling thread may record an event on this stream.
  [[nodiscard]] bool recordable_here() const noexcept
  {
    return owner == 0 || owner == this_thread_serial();
  }
};

template <class State>
class stream_registry {
 public:
  using factory = std::function<std::unique_ptr<State>(stream_identity)>;

  /// `make(identity)` builds the State of a stream seen for the first time.
  explicit stream_registry(factory make) : make_{std::move(make)} {}

  /// The State of `stream` as seen from the calling thread. Hot path: no lock on a cache hit.
  State& get(cudaStream_t stream)
  {
    auto const* set = &cache_state().entries[set_of(stream) * cache_ways];
    for (std::size_t i = 0; i < cache_ways; ++i) {
      if (set[i].registry == id_ && set[i].stream == stream) {
        return *static_cast<State*>(set[i].state);
      }
    }
    return get_slow(stream);
  }

  /// Calls f(State&) for every State, holding the registry mutex (not the States' own locks).
  template <class F>
  void for_each(F&& f)
  {
    std::lock_guard lock{mutex_};
    for (auto& s : all_) { f(*s); }
  }

  /// Calls f(State&) for the States in order until one returns true (then true), holding the
  /// registry mutex (not the States' own locks).
  template <class F>
  bool find_if(F&& f)
  {
    std::lock_guard lock{mutex_};
    for (auto& s : all_) {
      if (f(*s)) { return true; }
    }
    return false;
  }

 private:
  struct cache_entry {
    std::uint64_t registry{};
    cudaStream_t stream{};
    void* state{};
  };
  static constexpr std::size_t cache_ways = 4;
  static constexpr std::size_t cache_sets = 8;
  struct thread_cache {
    std::array<cache_entry, cache_ways * cache_sets> entries{};
    std::array<std::uint8_t, cache_sets> next{};  // the way each set replaces next
  };
  static thread_cache& cache_state()
  {
    static thread_local thread_cache c;
    return c;
  }
  /// The cache set of (this registry, stream).
  [[nodiscard]] std::size_t set_of(cudaStream_t stream) const noexcept
  {
    auto const h = id_ * 0x9E3779B97F4A7C15ULL ^
                   reinterpret_cast<std::uintptr_t>(stream) * 0xC2B2AE3D27D4EB4FULL;
    return static_cast<std::size_t>(h >> 61);  // cache_sets == 8
  }

  State& get_slow(cudaStream_t stream)
  {
    auto const who = stream_identity::of(stream);
    State* state{};
    {
      std::lock_guard lock{mutex_};
      auto& slot = by_identity_[who];
      if (slot == nullptr) {
        all_.push_back(make_(who));
        slot = all_.back().get();
      }
      state = slot;
    }
    auto& c                           = cache_state();
    auto const set                    = set_of(stream);
    auto const way                    = c.next[set]++ % cache_ways;
    c.entries[set * cache_ways + way] = cache_entry{id_, stream, state};
    return *state;
  }

  std::uint64_t const id_{next_registry_id()};
  factory make_;
  std::mutex mutex_;
  std::map<stream_identity, State*> by_identity_;
  std::vector<std::unique_ptr<State>> all_;
};

}  // namespace gpumem::detail
