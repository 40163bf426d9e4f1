// Backing one reserved address range on demand. See detail/vmm_backing.hpp.
#include <gpumem/align.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/vmm_backing.hpp>
#include <gpumem/error.hpp>

#include <algorithm>

namespace gpumem::detail {
namespace {

/// The block of `free` (address-ordered) that ends at `at`, or null.
free_block const* ending_at(std::vector<free_block> const& free, char* at)
{
  auto it = std::lower_bound(free.begin(), free.end(), at,
                             [](free_block const& b, char* p) { return b.ptr < p; });
  if (it == free.begin()) { return nullptr; }
  --it;
  return it->end() == at ? &*it : nullptr;
}

/// The block of `free` (address-ordered) that starts at `at`, or null.
free_block const* starting_at(std::vector<free_block> const& free, char* at)
{
  auto it = std::lower_bound(free.begin(), free.end(), at,
                             [](free_block const& b, char* p) { return b.ptr < p; });
  return it != free.end() && it->ptr == at ? &*it : nullptr;
}

std::vector<free_block> snapshot(coalescing_free_list const& list)
{
  std::vector<free_block> blocks;
  list.for_each([&](free_block b) { blocks.push_back(b); });
  std::sort(blocks.begin(), blocks.end(),
            [](free_block const& a, free_block const& b) { return a.ptr < b.ptr; });
  return blocks;
}

/// `free` less the ranges `cut` (each inside one free block), as a new list, plus `add` if valid.
coalescing_free_list rebuild(std::vector<free_block> const& free, std::vector<free_block> cut,
                             free_block add)
{
  std::sort(cut.begin(), cut.end(),
            [](free_block const& a, free_block const& b) { return a.ptr < b.ptr; });
  coalescing_free_list out;
  auto c = cut.begin();
  for (auto const& b : free) {
    char* at = b.ptr;
    for (; c != cut.end() && c->ptr < b.end(); ++c) {
      if (c->ptr > at) { out.insert({at, static_cast<std::size_t>(c->ptr - at), b.chunk}); }
      at = c->end();
    }
    if (at < b.end()) { out.insert({at, static_cast<std::size_t>(b.end() - at), b.chunk}); }
  }
  if (add.valid()) { out.insert(add); }
  return out;
}

}  // namespace

vmm_backing::vmm_backing(runtime& rt, vmm_backing_options const& options)
    : runtime_{&rt},
      device_{options.device < 0 ? rt.current_device() : options.device},
      granularity_{rt.vmm_granularity(device_)},
      reserved_{},
      growth_percent_{options.growth_percent}
{
  auto const device_granularity = granularity_;
  if (options.granularity_bytes != 0) {
    GPUMEM_EXPECTS(is_aligned(options.granularity_bytes, device_granularity), logic_error,
                   format("vmm_pool_memory_resource: granularity ", options.granularity_bytes,
                          " bytes is not a multiple of the device's granularity (",
                          device_granularity, " bytes)"));
    granularity_ = options.granularity_bytes;
  }
  auto const wanted =
      options.reserve_bytes != 0 ? options.reserve_bytes : 2 * rt.memory_info().total_bytes;
  GPUMEM_EXPECTS(wanted > 0 && can_align_up(wanted, granularity_), logic_error,
                 format("vmm_pool_memory_resource: cannot reserve ", wanted, " bytes"));
  reserved_ = align_up(wanted, granularity_);
  base_     = static_cast<char*>(rt.vmm_reserve(reserved_, granularity_));
  try {
    unmapped_.emplace(base_, reserved_);
  } catch (...) {
    rt.vmm_unreserve(base_, reserved_);
    throw;
  }
}

vmm_backing::~vmm_backing()
{
  for (auto const& [at, m] : mapped_) {
    runtime_->vmm_unmap(at, m.bytes);
    runtime_->vmm_release(m.handle);
  }
  runtime_->vmm_unreserve(base_, reserved_);
}

std::size_t vmm_backing::largest_unmapped() const noexcept
{
  std::size_t largest{};
  for (auto const& [at, bytes] : unmapped_) { largest = std::max(largest, bytes); }
  return largest;
}

std::string vmm_backing::describe() const
{
  return format("physical memory mapped ", bytes_str(mapped_bytes_), " in ", mapped_.size(),
                " handles; address space left ", bytes_str(unmapped_bytes()), " of ",
                bytes_str(reserved_), " (largest unmapped range ", bytes_str(largest_unmapped()),
                ")");
}

// -- extend --------------------------------------------------------------------------------------

vmm_backing::target vmm_backing::plan(std::vector<free_block> const& free, std::size_t n) const
{
  target best{};
  auto consider = [&](target const& t) {
    if (best.at == nullptr || t.cost < best.cost) { best = t; }
  };
  for (auto const& [u, bytes] : unmapped_) {
    auto const* below = ending_at(free, u);
    auto const* above = starting_at(free, u + bytes);
    auto const lo     = below != nullptr ? below->size : 0;
    auto const hi     = above != nullptr ? above->size : 0;
    if (lo + bytes + hi >= n) { consider({u, bytes, 0, false, bytes}); }
    if (auto len = align_up(n - std::min(n, lo), granularity_); len <= bytes) {
      consider({u, len, bytes - len, false, len});
    }
    if (auto len = align_up(n - std::min(n, hi), granularity_); len <= bytes) {
      consider({u + bytes - len, len, bytes - len, true, len});
    }
  }
  GPUMEM_EXPECTS(best.at != nullptr, out_of_memory,
                 format("no unmapped address range can serve ", bytes_str(n), ": ", describe()));
  return best;
}

std::vector<vmm_backing::piece> vmm_backing::idle_handles(std::vector<free_block> const& free,
                                                          target const* excluded) const
{
  std::vector<piece> found;
  for (auto const& b : free) {
    // A free block that the target joins is used in place: none of its handles may move.
    if (excluded != nullptr && (b.end() == excluded->at || b.ptr == excluded->at + excluded->bytes)) {
      continue;
    }
    for (auto it = mapped_.lower_bound(b.ptr);
         it != mapped_.end() && it->first + it->second.bytes <= b.end(); ++it) {
      found.push_back({it->second.handle, it->second.bytes, it->first});
    }
  }
  return found;
}

std::vector<vmm_backing::piece> vmm_backing::fill(target& t, std::vector<piece> donors,
                                                  std::size_t growth)
{
  std::sort(donors.begin(), donors.end(),
            [](piece const& a, piece const& b) { return a.bytes > b.bytes; });
  std::vector<piece> chosen;
  auto remaining = t.bytes;
  auto grow      = [&](std::size_t extra) {  // the target takes `extra` more of its room
    t.bytes += extra;
    t.room -= extra;
    if (t.downward) { t.at -= extra; }
  };
  for (auto& d : donors) {
    if (d.bytes <= remaining) {
      chosen.push_back(d);
      remaining -= d.bytes;
      d.bytes = 0;  // used
    }
  }
  if (remaining > 0) {  // the smallest larger donor, where the range has room for all of it
    piece* larger = nullptr;
    for (auto& d : donors) {
      if (d.bytes > remaining && d.bytes - remaining <= t.room) { larger = &d; }
    }
    if (larger != nullptr) {
      grow(larger->bytes - remaining);
      chosen.push_back(*larger);
      remaining = 0;
    }
  }
  if (remaining > 0) {
    auto const extra = std::min(t.room, growth);
    grow(extra);
    chosen.push_back({runtime_->vmm_create(remaining + extra, device_, false), remaining + extra,
                      nullptr});
  }
  return chosen;
}

void vmm_backing::extend(coalescing_free_list& idle, std::size_t n)
{
  auto const free  = snapshot(idle);
  auto t           = plan(free, n);
  auto const extra = align_up(mapped_bytes_ / 100 * growth_percent_, granularity_);
  std::vector<piece> pieces;
  try {
    pieces = fill(t, idle_handles(free, &t), extra);
  } catch (out_of_memory const& e) {
    GPUMEM_FAIL(out_of_memory, format(e.what(), "; ", describe()));
  }
  execute(idle, free, t, pieces);
}

void vmm_backing::execute(coalescing_free_list& idle, std::vector<free_block> const& free,
                          target const& t, std::vector<piece>& pieces)
{
  std::vector<free_block> moved;
  for (auto const& p : pieces) {
    if (p.from != nullptr) { moved.push_back({p.from, p.bytes, 0}); }
  }
  coalescing_free_list with_target;
  coalescing_free_list without_target;
  try {  // host memory first: a bad_alloc here changes nothing
    with_target    = rebuild(free, moved, {t.at, t.bytes, 0});
    without_target = rebuild(free, moved, {});
  } catch (...) {
    if (!pieces.empty() && pieces.back().from == nullptr) {
      runtime_->vmm_release(pieces.back().handle);
    }
    throw;
  }
  for (auto const& p : pieces) {
    if (p.from != nullptr) { unmap_donor(p); }
  }
  char* at = t.at;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    try {
      map_at(at, pieces[i]);
    } catch (...) {  // unwind: nothing of the target stays mapped; the moved handles are released
      for (std::size_t j = i; j < pieces.size(); ++j) { runtime_->vmm_release(pieces[j].handle); }
      unmap_range(t.at, static_cast<std::size_t>(at - t.at));
      idle = std::move(without_target);
      throw;
    }
    at += pieces[i].bytes;
  }
  idle = std::move(with_target);
}

void vmm_backing::unmap_donor(piece const& p) noexcept
{
  runtime_->vmm_unmap(p.from, p.bytes);
  mapped_.erase(p.from);
  mapped_bytes_ -= p.bytes;
  add_unmapped(p.from, p.bytes);
}

void vmm_backing::map_at(char* at, piece const& p)
{
  runtime_->vmm_map(at, p.bytes, p.handle, device_);
  mapped_.emplace(at, mapping{p.bytes, p.handle});
  mapped_bytes_ += p.bytes;
  take_unmapped(at, p.bytes);
}

void vmm_backing::unmap_range(char* at, std::size_t bytes) noexcept
{
  for (auto it = mapped_.lower_bound(at); it != mapped_.end() && it->first < at + bytes;) {
    runtime_->vmm_unmap(it->first, it->second.bytes);
    runtime_->vmm_release(it->second.handle);
    mapped_bytes_ -= it->second.bytes;
    add_unmapped(it->first, it->second.bytes);
    it = mapped_.erase(it);
  }
}

void vmm_backing::add_unmapped(char* at, std::size_t bytes)
{
  auto next = unmapped_.lower_bound(at);
  if (next != unmapped_.end() && at + bytes == next->first) {
    bytes += next->second;
    next = unmapped_.erase(next);
  }
  if (next != unmapped_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == at) {
      prev->second += bytes;
      return;
    }
  }
  unmapped_.emplace(at, bytes);
}

void vmm_backing::take_unmapped(char* at, std::size_t bytes)
{
  auto it = std::prev(unmapped_.upper_bound(at));  // the range holding `at` (plan() found it)
  auto const start = it->first;
  auto const end   = it->first + it->second;
  unmapped_.erase(it);
  if (start < at) { unmapped_.emplace(start, static_cast<std::size_t>(at - start)); }
  if (at + bytes < end) { unmapped_.emplace(at + bytes, static_cast<std::size_t>(end - at - bytes)); }
}

// -- release -------------------------------------------------------------------------------------

std::size_t vmm_backing::release_idle(coalescing_free_list& idle,
                                      std::size_t keep_mapped_bytes) noexcept
{
  try {
    auto const free = snapshot(idle);
    auto handles    = idle_handles(free, nullptr);
    std::sort(handles.begin(), handles.end(),
              [](piece const& a, piece const& b) { return a.bytes > b.bytes; });
    std::vector<free_block> gone;
    std::size_t released{};
    for (auto const& h : handles) {
      if (mapped_bytes_ - released <= keep_mapped_bytes) { break; }
      gone.push_back({h.from, h.bytes, 0});
      released += h.bytes;
    }
    if (gone.empty()) { return 0; }
    auto rest = rebuild(free, gone, {});
    for (auto const& g : gone) { unmap_range(g.ptr, g.size); }
    idle = std::move(rest);
    return released;
  } catch (...) {  // host memory exhausted while planning: nothing was changed
    return 0;
  }
}

// -- invariants ----------------------------------------------------------------------------------

void vmm_backing::check(std::vector<free_block> const& blocks) const
{
  auto fail = [](std::string const& what) {
    GPUMEM_FAIL(logic_error, "vmm_pool_memory_resource: invariant broken: " + what);
  };
  std::size_t sum{};
  for (auto const& [at, m] : mapped_) { sum += m.bytes; }
  if (sum != mapped_bytes_) { fail(format("mapped_bytes_ ", mapped_bytes_, " != sum ", sum)); }
  // Mappings and unmapped ranges tile the reservation; unmapped ranges are coalesced.
  char* at     = base_;
  auto m       = mapped_.begin();
  auto u       = unmapped_.begin();
  bool last_un = false;
  while (m != mapped_.end() || u != unmapped_.end()) {
    if (m != mapped_.end() && m->first == at) {
      at += (m++)->second.bytes;
      last_un = false;
    } else if (u != unmapped_.end() && u->first == at && !last_un) {
      at += (u++)->second;
      last_un = true;
    } else {
      fail(format("the mappings and unmapped ranges do not tile the reservation at ",
                  static_cast<void*>(at)));
    }
  }
  if (at != base_ + reserved_) { fail("the mappings and unmapped ranges do not reach its end"); }
  std::size_t block_bytes{};
  for (auto const& b : blocks) {
    block_bytes += b.size;
    auto it = mapped_.upper_bound(b.ptr);
    char* p = b.ptr;
    if (it != mapped_.begin()) { --it; }
    while (p < b.end() && it != mapped_.end() && it->first <= p && p < it->first + it->second.bytes) {
      p = it->first + it->second.bytes;
      ++it;
    }
    if (p < b.end()) {
      fail(format("block ", static_cast<void*>(b.ptr), " (", b.size,
                  " bytes) lies over unmapped memory at ", static_cast<void*>(p)));
    }
  }
  if (block_bytes != mapped_bytes_) {
    fail(format("free and handed-out bytes ", block_bytes, " != mapped bytes ", mapped_bytes_));
  }
}

}  // namespace gpumem::detail
