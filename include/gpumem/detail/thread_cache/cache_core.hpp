// gpumem/detail/thread_cache/cache_core.hpp — the shared state of one
// thread_cache_resource_adaptor: its threads' caches, who owns which block, the byte budget, and
// every slow path (not API). Design and invariants: docs/design.md, "The per-thread cache".
//
// A block "enters" the cache system when a miss takes it from upstream and "leaves" when it is
// flushed back; `owners_` (64 lock-striped shards) maps each such block to its owning cache and is
// touched only then and on frees by a thread that does not own the block.
// Invariants (check_invariants, at quiescent points):
//   every block in a cache's `blocks_` is in `owners_` with that owner and size, and vice versa
//   (orphans -- blocks of exited threads still handed out -- have no owner);
//   credit_used_ == Σ caches' credit <= total cap at the time each credit was taken.
// Thread safety: allocate/deallocate/trim/stats from any thread. The adaptor's destructor
// (shutdown) must not race with calls on the adaptor, as for every resource.
// Lock order: mutex_ -> one shard's mutex; upstream calls are made holding mutex_ at most.
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/detail/address_map.hpp>
#include <gpumem/detail/spin_mutex.hpp>
#include <gpumem/detail/invariant_checks.hpp>
#include <gpumem/detail/thread_cache/cache_options.hpp>
#include <gpumem/detail/thread_cache/local_cache.hpp>
#include <gpumem/resource_ref.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace gpumem::detail::thread_cache {

/// The calling thread's caches, found without a lock: up to 4 (adaptor id, cache) pairs.
struct hot_table {
  struct entry {
    std::uint64_t id;
    local_cache* cache;
  };
  std::array<entry, 4> entries;
  unsigned next;
  bool exiting;  ///< the thread is running its thread_local destructors: bypass every cache
};
inline thread_local constinit hot_table hot_caches{};

/// The calling thread's cache of the adaptor `id`, or nullptr.
[[nodiscard]] inline local_cache* find_local(std::uint64_t id) noexcept
{
  for (auto const& e : hot_caches.entries) {
    if (e.id == id) { return e.cache; }
  }
  return nullptr;
}

class cache_core : public std::enable_shared_from_this<cache_core> {
 public:
  /// Throws logic_error for a max cached size of 0 or above 4 GiB, or a fraction outside [0, 1].
  cache_core(device_async_resource_ref upstream, options opts);
  cache_core(cache_core const&)            = delete;
  cache_core& operator=(cache_core const&) = delete;
  ~cache_core();

  void* allocate(std::size_t bytes, cudaStream_t stream)
  {
    [[maybe_unused]] auto const gate = gate_.enter();
    if (bytes > max_cached_bytes_) { return allocate_large(bytes, stream); }
    if (auto* c = find_local(id_)) {
      if (char* p = c->try_allocate(units_of(bytes), stream)) { return p; }
    }
    void* p = allocate_slow(bytes, stream);
    check_after_slow_path("the thread cache's allocate_slow", [this] { check_invariants(); });
    return p;
  }

  void deallocate(void* ptr, std::size_t bytes, cudaStream_t stream) noexcept
  {
    [[maybe_unused]] auto const gate = gate_.enter();
    auto* p                          = static_cast<char*>(ptr);
    if (bytes > max_cached_bytes_) {
      deallocate_large(p, bytes, stream);
      return;
    }
    if (auto* c = find_local(id_); c != nullptr && c->try_deallocate(p, units_of(bytes), stream)) {
      return;
    }
    deallocate_slow(p, bytes, stream);
    check_after_slow_path("the thread cache's deallocate_slow", [this] { check_invariants(); });
  }

  /// Returns every cache's blocks upstream: the caller's now, other threads' at their next call.
  void trim();
  /// Flushes all caches and detaches them (the adaptor's destructor).
  void shutdown() noexcept;

  [[nodiscard]] stats get_stats() const;
  [[nodiscard]] std::uint64_t bad_deallocations() const noexcept { return bad_frees_.load(); }
  [[nodiscard]] device_async_resource_ref upstream() const noexcept { return upstream_; }
  [[nodiscard]] options const& opts() const noexcept { return opts_; }
  /// The cap on all caches' bytes now: min(total cap, pool fraction x upstream pool size), the
  /// latter never below 4 of the largest cached blocks nor the thread floor x caches.
  [[nodiscard]] std::size_t total_cap() const;
  /// What each thread's cache may always hold: min(thread floor, per-thread cap).
  [[nodiscard]] std::size_t thread_floor() const noexcept
  {
    return std::min(opts_.thread_floor_bytes, opts_.thread_cap_bytes);
  }
  /// Every cached block (pointer, size), for tests at quiescent points.
  [[nodiscard]] std::vector<std::pair<void*, std::size_t>> cached_blocks() const;
  /// Throws logic_error naming the first broken invariant (quiescent points only).
  void check_invariants() const;

  /// Called by the thread-exit hook: flushes `c`, orphans its live blocks, deletes it.
  void retire(local_cache* c) noexcept;

 private:
  struct owner_entry {
    local_cache* owner{};  // nullptr: an orphan (its thread exited while the block was live)
    std::uint32_t block_units{};
    std::uint32_t request_units{};  // kept for orphans only
  };
  struct alignas(64) owner_shard {
    spin_mutex mutex;
    address_map<owner_entry, 0xD6E8FEB86659FD93ULL> map;
  };
  static constexpr std::size_t shard_count = 64;
  /// The pool-fraction cap never goes below this many blocks of the largest cached size.
  static constexpr std::size_t min_fraction_cap_blocks = 4;
  /// Over a lean pool, the caches together are bounded at a growth to this share of the pool
  /// fraction (1/16 of 12.5 %: 0.8 % of the pool); see bound_other_caches().
  static constexpr double growth_bound_share = 1.0 / 16;

  /// Over a lean pool, when a growth finds all caches holding more than growth_bound_share of
  /// the pool fraction: asks the other threads' caches to flush at their next calls.
  void bound_other_caches(local_cache const* mine) noexcept;
  /// Whether the upstream is a lean pool (its growth hook says so).
  [[nodiscard]] bool lean_upstream() const noexcept;
  /// The upstream's growth hook: flushes the calling thread's cache (see options).
  [[gnu::cold, gnu::noinline]] static bool flush_before_growth(void* self) noexcept;
  void* allocate_large(std::size_t bytes, cudaStream_t stream);
  [[gnu::cold, gnu::noinline]] void* allocate_slow(std::size_t bytes, cudaStream_t stream);
  [[gnu::cold, gnu::noinline]] void deallocate_slow(char* p, std::size_t bytes,
                                                    cudaStream_t stream) noexcept;
  void deallocate_large(char* p, std::size_t bytes, cudaStream_t stream) noexcept;
  local_cache* attach();
  void* take_upstream(local_cache* c, std::size_t bytes, cudaStream_t stream);
  void record(local_cache& c, char* p, std::uint64_t units, cudaStream_t stream);
  void service(local_cache& c) noexcept;
  void drain(local_cache& c) noexcept;
  void apply(local_cache& c, remote_free const& n) noexcept;
  void free_own(local_cache& c, char* p, std::uint64_t units, cudaStream_t stream) noexcept;
  void free_elsewhere(local_cache* c, char* p, std::size_t bytes, cudaStream_t stream) noexcept;
  void cache_block(local_cache& c, char* p, cudaStream_t stream) noexcept;
  int open_slot(local_cache& c, cudaStream_t stream) noexcept;
  bool acquire_credit(local_cache& c, std::size_t bytes) noexcept;
  void return_credit(local_cache& c) noexcept;
  void release(local_cache& c, char* p, cudaStream_t stream) noexcept;
  [[gnu::cold, gnu::noinline]] void flush_slot(local_cache& c, unsigned slot, bool half) noexcept;
  [[gnu::cold, gnu::noinline]] void flush(local_cache& c, bool half) noexcept;
  void remove_cached(local_cache& c, char* p) noexcept;
  bool request_flushes(local_cache const* except, bool wait);
  void orphan_live_blocks(local_cache& c) noexcept;
  void drain_orphaned(local_cache& c) noexcept;
  void fold_counters(local_cache const& c) noexcept;
  void report_bad(void const* p, std::size_t bytes, std::string const& why) noexcept;
  owner_shard& shard_of(char const* p) noexcept
  {
    return shards_[(reinterpret_cast<std::uintptr_t>(p) >> 8) * 0x9E3779B97F4A7C15ULL >> 58];
  }
  void check_cache(local_cache const& c) const;

  device_async_resource_ref upstream_;
  options opts_;
  std::size_t const max_cached_bytes_;
  unsigned const classes_;
  std::uint64_t const id_;

  mutable std::mutex mutex_;  // guards caches_, alive_, retired_
  // The invariant-check build's gate (allocate, deallocate, trim and a thread's exit;
  // detail/invariant_checks.hpp); an empty member otherwise.
  [[no_unique_address]] call_gate gate_;
  std::vector<std::unique_ptr<local_cache>> caches_;  // one per thread that allocated
  std::atomic<bool> alive_{true};
  thread_stats retired_;  // the counters of caches that are gone

  mutable std::array<owner_shard, shard_count> shards_;  // mutable: checks lock them
  std::atomic<std::size_t> credit_used_{};               // == Σ caches' credit
  std::atomic<std::size_t> attached_{};                  // == caches_.size()
  std::atomic<std::uint64_t> bad_frees_{};
  std::atomic<std::uint64_t> remote_frees_{};
  std::atomic<std::uint64_t> passed_through_{};
  std::atomic<std::uint64_t> growth_flushes_{};
};

}  // namespace gpumem::detail::thread_cache
