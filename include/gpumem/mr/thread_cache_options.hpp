// gpumem/mr/thread_cache_options.hpp — the configuration and the statistics of
// thread_cache_resource_adaptor (gpumem/mr/thread_cache_resource_adaptor.hpp): every option and its
// default, written once; the spec table and the Python bindings read their defaults from
// `thread_cache_options{}`.
#pragma once

#include <gpumem/detail/growth_hook.hpp>

#include <cstddef>
#include <cstdint>

#include <functional>
#include <vector>

namespace gpumem::mr {

struct thread_cache_options {
  /// Requests above this size pass straight to the upstream (rounded up to 256 B; >= 256 B).
  std::size_t max_cached_size_bytes = std::size_t{1} << 20;
  /// Most bytes of freed blocks one thread may hold.
  std::size_t thread_cap_bytes = std::size_t{32} << 20;
  /// Most bytes of freed blocks all threads together may hold.
  std::size_t total_cap_bytes = std::size_t{1} << 30;
  /// When `upstream_pool_bytes` is set: the caches together hold at most this fraction of it.
  double pool_fraction = 0.125;
  /// The pool-fraction cap never goes below this many bytes for each thread that has a cache (at
  /// most `thread_cap_bytes`), so that a lean pool's small size does not starve its threads'
  /// caches; a cache holding no more than this is not flushed before the pool grows either.
  /// Over a lean pool (vmm_pool) it is also each thread's cap, when not 0: blocks waiting in a
  /// cache make such a pool grow.
  std::size_t thread_floor_bytes = std::size_t{8} << 20;
  /// The upstream's current pool size (e.g. pool_memory_resource::pool_size); empty: no such cap.
  /// Left empty, the adaptor built over an upstream pointer fills it in (wired_to).
  std::function<std::size_t()> upstream_pool_bytes{};
  /// The upstream, when it can call back before it grows (our pools): the growing thread's cache
  /// is flushed into it first, so that cached blocks never make a lean pool take new memory.
  /// Left null, the adaptor built over an upstream pointer fills it in (wired_to).
  gpumem::detail::growth_hook_target* upstream_growth{};
};

/// One thread's cache. Counters only grow; bytes_cached is the current holding.
struct thread_cache_thread_stats {
  std::uint64_t thread{};   ///< a process-unique number of the owner thread
  std::uint64_t hits{};     ///< allocations served from the cache
  std::uint64_t misses{};   ///< allocations of cacheable sizes taken from upstream
  std::uint64_t flushed{};  ///< cached blocks returned upstream (cap, trim, out of memory, exit)
  std::size_t bytes_cached{};
};

/// All caches of one adaptor: totals include threads that have exited.
struct thread_cache_stats {
  std::uint64_t hits{};
  std::uint64_t misses{};
  std::uint64_t flushed{};
  std::uint64_t remote_frees{};    ///< frees of a block cached by another thread
  std::uint64_t passed_through{};  ///< requests above max_cached_size_bytes
  std::uint64_t growth_flushes{};  ///< caches flushed because the pool below had to grow
  std::size_t bytes_cached{};      ///< == Σ per_thread[i].bytes_cached
  std::size_t cap_bytes{};         ///< the effective cap on bytes_cached now
  std::vector<thread_cache_thread_stats> per_thread;  ///< live threads only
};

}  // namespace gpumem::mr
