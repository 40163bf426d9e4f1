// The slow paths of the per-thread cache: misses, frees that the hot path cannot absorb, frees of
// another thread's blocks, attaching a thread, thread exit and shutdown. See cache_core.hpp.
#include <gpumem/detail/thread_cache/cache_core.hpp>

#include <gpumem/detail/format.hpp>
#include <gpumem/detail/stream_ordered_memory_resource.hpp>
#include <gpumem/detail/stream_registry.hpp>
#include <gpumem/error.hpp>

#include <algorithm>
#include <new>

namespace gpumem::detail::thread_cache {
namespace {

constexpr char const* resource_name    = "thread_cache_resource_adaptor";
constexpr std::size_t max_cached_limit = std::size_t{1} << 32;  // block_units must fit 32 bits

/// The calling thread's caches of every adaptor it used; flushes them when the thread exits.
struct thread_exit_hook {
  std::vector<std::pair<std::shared_ptr<cache_core>, local_cache*>> caches;
  thread_exit_hook()                                   = default;
  thread_exit_hook(thread_exit_hook const&)            = delete;
  thread_exit_hook& operator=(thread_exit_hook const&) = delete;
  ~thread_exit_hook()
  {
    hot_caches.exiting = true;
    hot_caches.entries = {};
    for (auto& [core, c] : caches) { core->retire(c); }
  }
};

thread_exit_hook& exit_hook()
{
  static thread_local thread_exit_hook hook;
  return hook;
}

std::size_t checked_max_cached(options const& o)
{
  GPUMEM_EXPECTS(o.max_cached_size_bytes > 0 && o.max_cached_size_bytes <= max_cached_limit,
                 logic_error,
                 format(resource_name, ": max_cached_size_bytes must be in 1 B .. 4 GiB, got ",
                        o.max_cached_size_bytes));
  GPUMEM_EXPECTS(o.pool_fraction >= 0.0 && o.pool_fraction <= 1.0, logic_error,
                 format(resource_name, ": pool_fraction must be in [0, 1], got ", o.pool_fraction));
  return units_of(o.max_cached_size_bytes) * granule_bytes;
}

void push(std::atomic<remote_free*>& inbox, remote_free* n) noexcept
{
  n->next = inbox.load(std::memory_order_relaxed);
  while (!inbox.compare_exchange_weak(n->next, n, std::memory_order_release,
                                      std::memory_order_relaxed)) {}
}

}  // namespace

cache_core::cache_core(device_async_resource_ref upstream, options opts)
    : upstream_{upstream},
      opts_{std::move(opts)},
      max_cached_bytes_{checked_max_cached(opts_)},
      classes_{class_of(units_of(max_cached_bytes_)) + 1},
      id_{next_registry_id()}
{
  if (opts_.upstream_growth != nullptr) {
    if (opts_.upstream_growth->lean() && opts_.thread_floor_bytes != 0) {
      opts_.thread_cap_bytes = std::min(opts_.thread_cap_bytes, opts_.thread_floor_bytes);
    }
    opts_.upstream_growth->add_before_growth(&cache_core::flush_before_growth, this);
  }
}

// Runs inside the calling thread's own miss (upstream allocate -> pool grows -> here): the miss
// has only reserved room in blocks_, which erasing entries keeps, so flushing is safe.
bool cache_core::flush_before_growth(void* self) noexcept
{
  auto* core = static_cast<cache_core*>(self);
  auto* c    = hot_caches.exiting ? nullptr : find_local(core->id_);
  core->bound_other_caches(c);
  if (c == nullptr || c->bytes_cached_.get() <= core->thread_floor()) { return false; }
  core->flush(*c, false);
  core->growth_flushes_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

cache_core::~cache_core()
{
  shutdown();
}

void* cache_core::allocate_large(std::size_t bytes, cudaStream_t stream)
{
  auto* c = hot_caches.exiting ? nullptr : find_local(id_);
  void* p = take_upstream(c, bytes, stream);
  passed_through_.fetch_add(1, std::memory_order_relaxed);
  return p;
}

void* cache_core::allocate_slow(std::size_t bytes, cudaStream_t stream)
{
  local_cache* c = find_local(id_);
  if (c == nullptr) { c = attach(); }
  if (c == nullptr) { return take_upstream(nullptr, bytes, stream); }
  service(*c);
  auto const units = units_of(bytes);
  if (char* p = c->try_allocate(units, stream)) { return p; }
  c->blocks_.reserve(c->blocks_.size() + 1);  // all that may throw before upstream is asked
  auto* p = static_cast<char*>(take_upstream(c, units * granule_bytes, stream));
  record(*c, p, units, stream);
  c->misses_.add(1);
  return p;
}

/// Registers a block taken from upstream as owned by `c` (live); on failure gives it back.
/// `c` may still know `p`: another thread released it upstream (a free on its per-thread stream)
/// and posted a notice that `c` has not taken in yet. The notice was posted before the release,
/// so it is in the inbox now: take it in first, or it would later erase the new entry.
void cache_core::record(local_cache& c, char* p, std::uint64_t units, cudaStream_t stream)
{
  if (c.blocks_.find(p) != nullptr) { drain(c); }
  auto const u = static_cast<std::uint32_t>(units);
  try {
    auto& s = shard_of(p);
    std::lock_guard lock{s.mutex};
    s.map.insert(p, owner_entry{&c, u, u});
  } catch (...) {
    detail::async_deallocate(upstream_, p, units * granule_bytes, granule_bytes, stream);
    throw;
  }
  c.blocks_.insert_unchecked(p, block_entry{u, u, 0, false});
}

/// Upstream memory; on out_of_memory, when any cache holds blocks, flushes them (the caller's
/// now, the others' within flush_wait) and tries once more.
void* cache_core::take_upstream(local_cache* c, std::size_t bytes, cudaStream_t stream)
{
  try {
    return detail::async_allocate(upstream_, bytes, granule_bytes, stream);
  } catch (out_of_memory const&) {
    bool const mine = c != nullptr && c->bytes_cached_.get() > 0;
    if (c != nullptr) { flush(*c, false); }
    if (!request_flushes(c, true) && !mine) { throw; }
  }
  return gpumem::detail::async_allocate(upstream_, bytes, granule_bytes, stream);
}

local_cache* cache_core::attach()
{
  if (hot_caches.exiting) { return nullptr; }
  auto& hook     = exit_hook();
  local_cache* c = nullptr;
  for (auto const& [core, mine] : hook.caches) {
    if (core.get() == this) { c = mine; }
  }
  if (c == nullptr) {
    std::erase_if(hook.caches, [](auto& e) {  // caches of adaptors that are gone
      if (e.first->alive_.load()) { return false; }
      e.first->retire(e.second);
      return true;
    });
    auto fresh = std::make_unique<local_cache>(classes_, this_thread_serial());
    hook.caches.reserve(hook.caches.size() + 1);
    std::lock_guard lock{mutex_};
    caches_.push_back(std::move(fresh));
    attached_.store(caches_.size(), std::memory_order_relaxed);
    c = caches_.back().get();
    hook.caches.emplace_back(shared_from_this(), c);
  }
  hot_caches.entries[hot_caches.next++ % hot_caches.entries.size()] = {id_, c};
  return c;
}

/// Takes in other threads' frees and honours a flush request.
void cache_core::service(local_cache& c) noexcept
{
  if (c.inbox_.load(std::memory_order_acquire) != nullptr) { drain(c); }
  if (c.flush_requested_.exchange(false, std::memory_order_acq_rel)) { flush(c, false); }
}

void cache_core::drain(local_cache& c) noexcept
{
  auto* n = c.inbox_.exchange(nullptr, std::memory_order_acquire);
  while (n != nullptr) {
    auto* next = n->next;
    apply(c, *n);
    delete n;
    n = next;
  }
}

/// One free posted by another thread, for a block `c` owns.
void cache_core::apply(local_cache& c, remote_free const& n) noexcept
{
  auto const bytes = std::size_t{n.request_units} * granule_bytes;
  auto* e          = c.blocks_.find(n.ptr);
  if (e == nullptr) { return; }  // cannot happen: a block changes owner only through its owner
  if (e->cached) {
    report_bad(n.ptr, bytes, "double free (the block was already freed)");
    if (n.forget) { remove_cached(c, n.ptr); }  // the sender already released it upstream
    return;
  }
  if (e->request_units != n.request_units) {
    report_bad(n.ptr, bytes,
               format("wrong size (allocated as ", std::size_t{e->request_units} * granule_bytes,
                      " bytes); the block is freed"));
  }
  if (n.forget) {
    c.blocks_.erase(n.ptr);
    return;
  }
  cache_block(c, n.ptr, n.stream);
}

void cache_core::deallocate_slow(char* p, std::size_t bytes, cudaStream_t stream) noexcept
{
  local_cache* c = hot_caches.exiting ? nullptr : find_local(id_);
  if (c != nullptr) {
    service(*c);
    auto const units = units_of(bytes);
    if (c->try_deallocate(p, units, stream)) { return; }
    if (c->blocks_.find(p) != nullptr) {
      free_own(*c, p, units, stream);
      return;
    }
  }
  free_elsewhere(c, p, bytes, stream);
}

/// A free above the cached sizes: a pass-through, unless the block is in the cache system (then a
/// wrong size, handled as such: the block must not reach the upstream behind the caches' back).
void cache_core::deallocate_large(char* p, std::size_t bytes, cudaStream_t stream) noexcept
{
  auto* c   = hot_caches.exiting ? nullptr : find_local(id_);
  bool ours = c != nullptr && c->blocks_.find(p) != nullptr;
  if (!ours) {
    auto& s = shard_of(p);
    std::lock_guard lock{s.mutex};
    ours = s.map.find(p) != nullptr;
  }
  if (ours) {
    deallocate_slow(p, bytes, stream);
  } else {
    gpumem::detail::async_deallocate(upstream_, p, bytes, granule_bytes, stream);
  }
}

/// A free of a block `c` owns that the hot path refused.
void cache_core::free_own(local_cache& c, char* p, std::uint64_t units,
                          cudaStream_t stream) noexcept
{
  auto* e = c.blocks_.find(p);
  if (e->cached) {
    report_bad(p, units * granule_bytes, "double free (the block was already freed)");
    return;
  }
  if (e->request_units != units) {
    report_bad(p, units * granule_bytes,
               format("wrong size (allocated as ", std::size_t{e->request_units} * granule_bytes,
                      " bytes); the block is freed"));
  }
  cache_block(c, p, stream);
}

/// A free of a block the calling thread's cache does not own: another thread's (posted to its
/// owner, or released here when the stream is thread-relative), an orphan's, or none of ours.
void cache_core::free_elsewhere(local_cache* c, char* p, std::size_t bytes,
                                cudaStream_t stream) noexcept
{
  auto& s = shard_of(p);
  std::unique_lock lock{s.mutex};
  auto* g = s.map.find(p);
  if (g == nullptr || (c != nullptr && g->owner == c)) {  // not ours: the upstream judges
    lock.unlock();
    gpumem::detail::async_deallocate(upstream_, p, bytes, granule_bytes, stream);
    return;
  }
  auto const units =
      static_cast<std::uint32_t>(std::min<std::uint64_t>(units_of(bytes), UINT32_MAX));
  remote_frees_.fetch_add(1, std::memory_order_relaxed);
  owner_entry e = *g;
  // A thread-relative stream (cudaStreamPerThread) names another stream on the owner's thread,
  // so the block cannot wait in the owner's cache: it leaves the system here, on this stream.
  bool const leave = e.owner == nullptr || stream_identity::of(stream).owner != 0;
  remote_free* n   = nullptr;
  if (e.owner != nullptr) {
    n = new (std::nothrow) remote_free{nullptr, p, stream, units, leave};
    if (n == nullptr) {
      lock.unlock();
      report_bad(p, bytes, "out of host memory to hand the block to its owner thread; kept");
      return;
    }
  }
  if (leave) { s.map.erase(p); }
  if (n != nullptr) { push(e.owner->inbox_, n); }
  lock.unlock();
  if (e.owner == nullptr && e.request_units != units) {
    report_bad(p, bytes,
               format("wrong size (allocated as ", std::size_t{e.request_units} * granule_bytes,
                      " bytes); the block is freed"));
  }
  if (leave) {
    gpumem::detail::async_deallocate(upstream_, p, std::size_t{e.block_units} * granule_bytes,
                                     granule_bytes, stream);
  }
}

void cache_core::report_bad(void const* p, std::size_t bytes, std::string const& why) noexcept
{
  auto const count = bad_frees_.fetch_add(1) + 1;
  report_bad_deallocation(resource_name, p, bytes, why, count);
}

void cache_core::trim()
{
  [[maybe_unused]] auto const gate = gate_.enter();
  if (auto* c = hot_caches.exiting ? nullptr : find_local(id_)) {
    service(*c);
    flush(*c, false);
  }
  request_flushes(find_local(id_), false);
  check_after_slow_path("the thread cache's trim", [this] { check_invariants(); });
}

void cache_core::retire(local_cache* c) noexcept
{
  [[maybe_unused]] auto const gate = gate_.enter();
  std::lock_guard lock{mutex_};
  auto it = std::find_if(caches_.begin(), caches_.end(), [c](auto& p) { return p.get() == c; });
  if (it == caches_.end()) { return; }  // shut down already
  drain(*c);
  flush(*c, false);
  orphan_live_blocks(*c);
  drain_orphaned(*c);
  fold_counters(*c);
  caches_.erase(it);
  attached_.store(caches_.size(), std::memory_order_relaxed);
}

void cache_core::shutdown() noexcept
{
  std::lock_guard lock{mutex_};
  if (!alive_.exchange(false)) { return; }  // the upstream may be gone after the first call
  if (opts_.upstream_growth != nullptr) { opts_.upstream_growth->remove_before_growth(this); }
  for (auto& c : caches_) {
    drain(*c);
    flush(*c, false);
    drain_orphaned(*c);  // frees posted after the drain (none when the caller is quiescent)
    fold_counters(*c);
  }
  caches_.clear();
  attached_.store(0, std::memory_order_relaxed);
  for (auto& s : shards_) { s.map.clear(); }
}

/// The thread of `c` exits: its handed-out blocks stay valid and become orphans (any thread's
/// free of one releases it upstream). Only entries that still name `c` change: a block another
/// thread released upstream after `c` last took in its notices is still in `c.blocks_`, and the
/// upstream may have handed it to another cache since, whose entry must stay as it is.
void cache_core::orphan_live_blocks(local_cache& c) noexcept
{
  c.blocks_.for_each([&](char* p, block_entry const& e) {
    auto& s = shard_of(p);
    std::lock_guard lock{s.mutex};
    if (auto* g = s.map.find(p); g != nullptr && g->owner == &c) {
      *g = owner_entry{nullptr, e.block_units, e.request_units};
    }
  });
}

/// Frees posted to `c` that can no longer be cached: each block goes upstream on its stream.
void cache_core::drain_orphaned(local_cache& c) noexcept
{
  auto* n = c.inbox_.exchange(nullptr, std::memory_order_acquire);
  while (n != nullptr) {
    auto* next = n->next;
    if (!n->forget) {
      auto* e = c.blocks_.find(n->ptr);
      auto& s = shard_of(n->ptr);
      std::unique_lock lock{s.mutex};
      auto* g         = s.map.find(n->ptr);  // orphaned by `c` (or still `c`'s), nobody else's
      bool const ours = g != nullptr && (g->owner == nullptr || g->owner == &c) && e != nullptr &&
                        !e->cached && s.map.erase(n->ptr);
      lock.unlock();
      if (ours) {
        gpumem::detail::async_deallocate(upstream_, n->ptr,
                                         std::size_t{e->block_units} * granule_bytes, granule_bytes,
                                         n->stream);
      }
    }
    delete n;
    n = next;
  }
}

void cache_core::fold_counters(local_cache const& c) noexcept
{
  retired_.hits += c.hits_.get();
  retired_.misses += c.misses_.get();
  retired_.flushed += c.flushed_.get();
}

}  // namespace gpumem::detail::thread_cache
