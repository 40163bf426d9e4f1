// The per-thread cache's bounds: caching a freed block on the slow path, the byte budget
// (credit), flushing blocks back upstream, and asking other threads to flush. See cache_core.hpp.
#include <gpumem/detail/thread_cache/cache_core.hpp>

#include <gpumem/detail/stream_registry.hpp>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

namespace gpumem::detail::thread_cache {
namespace {

/// Credit is taken from the shared budget in steps of this much (so rarely), or what is needed.
std::size_t credit_step(std::size_t thread_cap) noexcept
{
  return std::min(thread_cap, std::max(thread_cap / 64, std::size_t{64} << 10));
}

/// How long an allocation that ran out of memory waits for other threads to flush their caches.
constexpr auto flush_wait = std::chrono::milliseconds{2};

}  // namespace

bool cache_core::lean_upstream() const noexcept
{
  return opts_.upstream_growth != nullptr && opts_.upstream_growth->lean();
}

std::size_t cache_core::total_cap() const
{
  auto cap = opts_.total_cap_bytes;
  if (opts_.upstream_pool_bytes) {  // never below a few of the largest blocks, nor the floors
    auto const pool     = static_cast<double>(opts_.upstream_pool_bytes());
    auto const fraction = static_cast<std::size_t>(opts_.pool_fraction * pool);
    auto const floor    = std::max(min_fraction_cap_blocks * max_cached_bytes_,
                                   attached_.load(std::memory_order_relaxed) * thread_floor());
    cap                 = std::min(cap, std::max(fraction, floor));
  }
  return cap;
}

// Over a lean pool every cached byte is a byte the pool holds beside the live ones, and the
// floors of many threads add up (thread_cache>vmm_pool with 128 threads held 1.19x what vmm_pool
// alone held on a synthetic trace). A growth there bounds them in total: when all caches hold
// more than growth_bound_share of the pool fraction, the other threads' caches are asked to flush
// (at their owners' next calls; the growth does not wait, nor does it wait for the registry).
void cache_core::bound_other_caches(local_cache const* mine) noexcept
{
  if (!lean_upstream() || !opts_.upstream_pool_bytes ||
      attached_.load(std::memory_order_relaxed) < 2) {
    return;
  }
  try {
    auto const pool  = static_cast<double>(opts_.upstream_pool_bytes());
    auto const bound = static_cast<std::size_t>(opts_.pool_fraction * pool * growth_bound_share);
    if (credit_used_.load(std::memory_order_relaxed) <= bound) { return; }
    // Under the pool's grow lock, while shutdown() takes the registry lock before the grow lock
    // (clear_before_growth): only try the registry lock here, never wait for it.
    std::unique_lock lock{mutex_, std::try_to_lock};
    if (!lock.owns_lock()) { return; }
    for (auto const& c : caches_) {
      if (c.get() != mine && c->bytes_cached_.get() != 0) {
        c->flush_requested_.store(true, std::memory_order_release);
      }
    }
  } catch (...) {  // NOLINT(bugprone-empty-catch): the growth goes on; the caches stay
  }
}

/// Caches a block `c` owns (live, freed on `stream`), or releases it upstream when the stream has
/// no slot, the budget has no room even after flushing half of `c`, or host memory runs out.
void cache_core::cache_block(local_cache& c, char* p, cudaStream_t stream) noexcept
{
  int slot = c.slot_of(stream);
  if (slot < 0) { slot = open_slot(c, stream); }
  auto const bytes = std::size_t{c.blocks_.find(p)->block_units} * granule_bytes;
  bool room =
      slot >= 0 && (c.bytes_cached_.get() + bytes <= c.credit_.get() || acquire_credit(c, bytes));
  if (slot >= 0 && !room) {
    flush(c, true);
    room = acquire_credit(c, bytes);
  }
  auto* e   = c.blocks_.find(p);  // flushing moves entries
  auto* bin = room ? &c.slots_[slot].bins[class_of(e->block_units)] : nullptr;
  if (bin != nullptr && bin->size() == bin->capacity()) {
    try {
      bin->reserve(std::max<std::size_t>(16, 2 * bin->capacity()));
    } catch (...) {
      bin = nullptr;
    }
  }
  if (bin == nullptr) {
    release(c, p, stream);
    return;
  }
  e->cached = true;
  e->slot   = static_cast<std::uint8_t>(slot);
  bin->push_back(p);
  c.slots_[slot].bytes += bytes;
  c.bytes_cached_.add(bytes);
}

/// A slot for `stream`: a fresh one, or the next victim after flushing it. -1 when out of memory.
int cache_core::open_slot(local_cache& c, cudaStream_t stream) noexcept
{
  unsigned i = 0;
  if (c.used_slots_ < max_stream_slots) {
    i = c.used_slots_;
    try {
      c.slots_[i].bins.resize(classes_);
    } catch (...) {
      return -1;
    }
    ++c.used_slots_;
  } else {
    i = c.next_victim_++ % max_stream_slots;
    flush_slot(c, i, false);
  }
  c.streams_[i] = stream;
  return static_cast<int>(i);
}

/// Raises `c`'s credit so that `bytes` more fit: within the per-thread cap, and from the shared
/// budget with a compare-and-swap that never passes total_cap(). False when either is full.
bool cache_core::acquire_credit(local_cache& c, std::size_t bytes) noexcept
{
  auto const cached = c.bytes_cached_.get();
  auto const have   = c.credit_.get();
  if (cached + bytes > opts_.thread_cap_bytes) { return false; }
  auto const need = cached + bytes - have;
  auto want =
      std::max(need, std::min(credit_step(opts_.thread_cap_bytes), opts_.thread_cap_bytes - have));
  std::size_t cap = 0;
  try {
    cap = total_cap();
  } catch (...) {
    return false;
  }
  auto used = credit_used_.load();
  do {
    if (used > cap || want > cap - used) { want = need; }
    if (used > cap || want > cap - used) { return false; }
  } while (!credit_used_.compare_exchange_weak(used, used + want));
  c.credit_.add(want);
  return true;
}

/// Gives back the credit `c` holds beyond its cached bytes.
void cache_core::return_credit(local_cache& c) noexcept
{
  auto const excess = c.credit_.get() - c.bytes_cached_.get();
  credit_used_.fetch_sub(excess);
  c.credit_.sub(excess);
}

/// Returns a live block of `c` upstream (it leaves the cache system).
void cache_core::release(local_cache& c, char* p, cudaStream_t stream) noexcept
{
  block_entry e;
  c.blocks_.erase(p, &e);
  {
    auto& s = shard_of(p);
    std::lock_guard lock{s.mutex};
    s.map.erase(p);
  }
  detail::async_deallocate(upstream_, p, std::size_t{e.block_units} * granule_bytes, granule_bytes,
                           stream);
  c.flushed_.add(1);
}

/// Returns the cached blocks of one slot upstream: all, or the colder half of each bin. Blocks of
/// another thread's thread-relative stream go back on the legacy default stream, which is ordered
/// after every blocking stream (only shutdown flushes another thread's cache).
void cache_core::flush_slot(local_cache& c, unsigned slot, bool half) noexcept
{
  auto stream = c.streams_[slot];
  if (stream_identity::of(stream).owner != 0 && c.thread_serial_ != this_thread_serial()) {
    stream = cudaStreamLegacy;
  }
  auto& s = c.slots_[slot];
  for (auto& bin : s.bins) {
    auto const n = half ? (bin.size() + 1) / 2 : bin.size();
    for (std::size_t k = 0; k < n; ++k) {
      auto const bytes = std::size_t{c.blocks_.find(bin[k])->block_units} * granule_bytes;
      s.bytes -= bytes;
      c.bytes_cached_.sub(bytes);
      release(c, bin[k], stream);
    }
    bin.erase(bin.begin(), bin.begin() + static_cast<std::ptrdiff_t>(n));
  }
}

void cache_core::flush(local_cache& c, bool half) noexcept
{
  for (unsigned i = 0; i < c.used_slots_; ++i) { flush_slot(c, i, half); }
  return_credit(c);
}

/// Takes a cached block out of its bin (another thread released it upstream: a double free).
void cache_core::remove_cached(local_cache& c, char* p) noexcept
{
  block_entry e;
  c.blocks_.erase(p, &e);
  auto& s   = c.slots_[e.slot];
  auto& bin = s.bins[class_of(e.block_units)];
  bin.erase(std::find(bin.begin(), bin.end(), p));
  auto const bytes = std::size_t{e.block_units} * granule_bytes;
  s.bytes -= bytes;
  c.bytes_cached_.sub(bytes);
}

/// Asks every cache but `except` that holds blocks to flush at its owner's next call; with
/// `wait`, waits up to flush_wait for the owners to do it. Returns whether any was asked.
bool cache_core::request_flushes(local_cache const* except, bool wait)
{
  auto pending = [&](bool ask) {
    bool any = false;
    std::lock_guard lock{mutex_};
    for (auto const& c : caches_) {
      if (c.get() == except || c->bytes_cached_.get() == 0) { continue; }
      if (ask) { c->flush_requested_.store(true, std::memory_order_release); }
      any = any || c->flush_requested_.load(std::memory_order_acquire);
    }
    return any;
  };
  if (!pending(true)) { return false; }
  auto const deadline = std::chrono::steady_clock::now() + flush_wait;
  while (wait && pending(false) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  return true;
}

}  // namespace gpumem::detail::thread_cache
