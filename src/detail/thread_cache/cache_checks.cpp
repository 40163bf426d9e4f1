// The per-thread cache's statistics and invariant checks. See cache_core.hpp.
#include <gpumem/detail/thread_cache/cache_core.hpp>

#include <gpumem/detail/format.hpp>
#include <gpumem/detail/stream_ordered_memory_resource.hpp>

#include <map>

namespace gpumem::detail::thread_cache {
namespace {
constexpr char const* resource_name = "thread_cache_resource_adaptor";
}  // namespace

stats cache_core::get_stats() const
{
  stats s;
  std::lock_guard lock{mutex_};
  s.hits    = retired_.hits;
  s.misses  = retired_.misses;
  s.flushed = retired_.flushed;
  for (auto const& c : caches_) {
    thread_stats t{c->thread_serial_, c->hits_.get(), c->misses_.get(), c->flushed_.get(),
                   c->bytes_cached_.get()};
    s.hits += t.hits;
    s.misses += t.misses;
    s.flushed += t.flushed;
    s.bytes_cached += t.bytes_cached;
    s.per_thread.push_back(t);
  }
  s.remote_frees   = remote_frees_.load(std::memory_order_relaxed);
  s.passed_through = passed_through_.load(std::memory_order_relaxed);
  s.growth_flushes = growth_flushes_.load(std::memory_order_relaxed);
  s.cap_bytes      = total_cap();
  return s;
}

std::vector<std::pair<void*, std::size_t>> cache_core::cached_blocks() const
{
  std::vector<std::pair<void*, std::size_t>> out;
  std::lock_guard lock{mutex_};
  for (auto const& c : caches_) {
    for (unsigned i = 0; i < c->used_slots_; ++i) {
      for (auto const& bin : c->slots_[i].bins) {
        for (char* p : bin) {
          out.emplace_back(p, std::size_t{c->blocks_.find(p)->block_units} * granule_bytes);
        }
      }
    }
  }
  return out;
}

/// One cache: its bins against its map, and its byte counts against its credit and cap.
void cache_core::check_cache(local_cache const& c) const
{
  std::size_t total = 0;
  std::size_t count = 0;
  for (unsigned i = 0; i < c.used_slots_; ++i) {
    std::size_t slot_bytes = 0;
    for (unsigned k = 0; k < c.slots_[i].bins.size(); ++k) {
      for (char* p : c.slots_[i].bins[k]) {
        auto const* e = c.blocks_.find(p);
        GPUMEM_INVARIANT(e != nullptr && e->cached && e->slot == i && class_of(e->block_units) == k,
                         resource_name,
                         format("cached block ", static_cast<void*>(p), " in slot ", i, " bin ", k,
                                " disagrees with its entry"));
        slot_bytes += std::size_t{e->block_units} * granule_bytes;
        ++count;
      }
    }
    GPUMEM_INVARIANT(
        slot_bytes == c.slots_[i].bytes, resource_name,
        format("slot ", i, " counts ", c.slots_[i].bytes, " bytes, holds ", slot_bytes));
    total += slot_bytes;
  }
  std::size_t cached_entries = 0;
  c.blocks_.for_each([&](char*, block_entry const& e) { cached_entries += e.cached ? 1 : 0; });
  GPUMEM_INVARIANT(cached_entries == count, resource_name,
                   format(cached_entries, " entries marked cached, ", count, " blocks in bins"));
  GPUMEM_INVARIANT(
      total == c.bytes_cached_.get() && total <= c.credit_.get() &&
          c.credit_.get() <= opts_.thread_cap_bytes,
      resource_name,
      format("bytes cached ", c.bytes_cached_.get(), " (bins hold ", total, "), credit ",
             c.credit_.get(), ", per-thread cap ", opts_.thread_cap_bytes));
}

void cache_core::check_invariants() const
{
  std::lock_guard lock{mutex_};
  std::size_t credit = 0;
  std::map<local_cache const*, std::size_t> owned;
  for (auto const& c : caches_) {
    check_cache(*c);
    credit += c->credit_.get();
    owned[c.get()] = 0;
  }
  GPUMEM_INVARIANT(
      credit == credit_used_.load(), resource_name,
      format("caches hold ", credit, " bytes of credit, the budget counts ", credit_used_.load()));
  for (auto& s : shards_) {
    std::lock_guard shard_lock{s.mutex};
    s.map.for_each([&](char* p, owner_entry const& g) {
      if (g.owner == nullptr) { return; }
      auto it = owned.find(g.owner);
      GPUMEM_INVARIANT(it != owned.end(), resource_name,
                       format("block ", static_cast<void*>(p), " names a cache that is gone"));
      auto const* e = g.owner->blocks_.find(p);
      GPUMEM_INVARIANT(e != nullptr && e->block_units == g.block_units, resource_name,
                       format("block ", static_cast<void*>(p), " is not in its owner's map"));
      ++it->second;
    });
  }
  for (auto const& [c, n] : owned) {
    // Blocks another thread released (a free on its per-thread stream) stay in the owner's map
    // until the owner takes in the notice.
    std::size_t forgotten = 0;
    for (auto* r = c->inbox_.load(std::memory_order_acquire); r != nullptr; r = r->next) {
      forgotten += r->forget ? 1 : 0;
    }
    GPUMEM_INVARIANT(n + forgotten == c->blocks_.size(), resource_name,
                     format("a cache owns ", c->blocks_.size(), " blocks, the owner map names ", n,
                            " and ", forgotten, " were released by other threads"));
  }
}

}  // namespace gpumem::detail::thread_cache
