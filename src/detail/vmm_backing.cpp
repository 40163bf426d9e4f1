// Backing one reserved address range on demand. See detail/vmm_backing.hpp.
#include <gpumem/align.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/vmm_backing.hpp>
#include <gpumem/error.hpp>

#include <algorithm>

namespace gpumem::detail {
namespace {

/// The peer devices to give access, checked: each exists, is not the pool's own device and has
/// peer capability with it (logic_error otherwise); all_peers adds every capable device.
std::vector<int> validated_peers(runtime& rt, int device, std::vector<int> const& asked,
                                 bool all_peers)
{
  int const count = rt.device_count();
  auto capable    = [&](int peer) {
    int can{};
    return rt.device_can_access_peer(&can, peer, device) == cudaSuccess && can != 0;
  };
  std::vector<int> out;
  for (int peer : asked) {
    GPUMEM_EXPECTS(
        peer >= 0 && peer < count && peer != device, logic_error,
        format("vmm_pool_memory_resource: peer device ", peer,
               " is not another device (the pool is on device ", device, " of ", count, ")"));
    GPUMEM_EXPECTS(
        capable(peer), logic_error,
        format("vmm_pool_memory_resource: device ", peer, " has no peer capability with device ",
               device, " (cudaDeviceCanAccessPeer), so it cannot be given access"));
    if (std::find(out.begin(), out.end(), peer) == out.end()) { out.push_back(peer); }
  }
  for (int peer = 0; all_peers && peer < count; ++peer) {
    if (peer != device && capable(peer) && std::find(out.begin(), out.end(), peer) == out.end()) {
      out.push_back(peer);
    }
  }
  return out;
}

}  // namespace

vmm_backing::vmm_backing(runtime& rt, mr::vmm_pool_options const& options)
    : runtime_{&rt},
      device_{options.device < 0 ? rt.current_device() : options.device},
      granularity_{rt.vmm_granularity(device_)},
      reserved_{},
      growth_percent_{options.growth_percent},
      busy_growth_percent_{options.busy_growth_percent},
      offload_directory_{options.offload_directory},
      spares_{rt, options.spare_bytes}
{
  GPUMEM_EXPECTS(options.device >= -1, logic_error,
                 format("vmm_pool_memory_resource: device ", options.device,
                        " is not a device number (give one, or -1 for the current device)"));
  peers_        = validated_peers(rt, device_, options.peer_devices, options.all_peers);
  handle_bytes_ = options.handle_bytes;
  properties_   = {options.shareable_handles,
                   options.gpu_direct_rdma && rt.vmm_gpu_direct_rdma_supported(device_)};
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
  // 0, or a size too large to round to granules (SIZE_MAX included): no limit, one handle per
  // growth. (Rounding such a size up wrapped around to a small one: granule-sized handles.)
  handle_bytes_ = handle_bytes_ == 0 || !can_align_up(handle_bytes_, granularity_)
                      ? SIZE_MAX
                      : std::max(granularity_, align_up(handle_bytes_, granularity_));
  base_         = static_cast<char*>(rt.vmm_reserve(reserved_, granularity_));
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
    if (!m.present) { continue; }  // paused: no physical memory
    runtime_->vmm_unmap(at, m.bytes);
    runtime_->vmm_release(m.handle);
  }
  spares_.release_all();
  runtime_->vmm_unreserve(base_, reserved_);
  staged_ = false;
  release_staging();
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

vmm_backing::target vmm_backing::plan(coalescing_free_list const& idle, std::size_t n) const
{
  target best{};
  // The cheapest; of equal cost, one growing downward: the free list carves a block's high end,
  // and a downward growth's request sits at the high end of its new memory (place()), so a cold
  // pass fills the range downward as a warm pass does. The warm pass then finds the cold pass's
  // layout (no free memory moved), and the rest of a last granule lies at the low end, where the
  // next growth joins it.
  auto consider = [&](target const& t) {
    if (best.at == nullptr || t.cost < best.cost ||
        (t.cost == best.cost && t.downward && !best.downward)) {
      best = t;
    }
  };
  for (auto const& [u, bytes] : unmapped_) {
    auto const lo = idle.ending_at(u).size;  // 0 when no free block ends there
    auto const hi = idle.starting_at(u + bytes).size;
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

std::vector<vmm_backing::piece> vmm_backing::idle_handles(coalescing_free_list const& idle,
                                                          target const* excluded) const
{
  std::vector<piece> found;
  idle.for_each([&](free_block const& b) {
    // A free block that the target joins is used in place: none of its handles may move.
    if (excluded != nullptr &&
        (b.end() == excluded->at || b.ptr == excluded->at + excluded->bytes)) {
      return;
    }
    for (auto it = mapped_.lower_bound(b.ptr);
         it != mapped_.end() && it->first + it->second.bytes <= b.end(); ++it) {
      found.push_back({it->second.handle, it->second.bytes, it->first, b});
    }
  });
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
  if (remaining > 0) { take_spares(t, remaining, chosen); }
  if (remaining > 0) {
    spares_.release_all();  // none left can serve this growth: they make way for new memory
    auto const extra = std::min(t.room, growth);
    grow(extra);
    try {
      create_pieces(remaining + extra, chosen);
    } catch (...) {  // the spares taken stay spares
      std::vector<vmm_spares::spare> taken;
      for (auto const& p : chosen) {
        if (p.spare) { taken.push_back({p.handle, p.bytes}); }
      }
      spares_.put_back(taken);
      throw;
    }
  }
  return chosen;
}

// Spares before new handles: mapping one costs no cuMemCreate. The last one may be larger than
// what is left, where the range has room for it (the target grows).
void vmm_backing::take_spares(target& t, std::size_t& remaining, std::vector<piece>& out)
{
  auto const taken = spares_.take(remaining, t.room);
  try {
    out.reserve(out.size() + taken.size());
  } catch (...) {
    spares_.put_back(taken);
    throw;
  }
  for (auto const& s : taken) {
    if (s.bytes > remaining) {
      auto const extra = s.bytes - remaining;
      t.bytes += extra;
      t.room -= extra;
      if (t.downward) { t.at -= extra; }
      remaining = s.bytes;
    }
    remaining -= s.bytes;
    out.push_back({s.handle, s.bytes, nullptr, {}, true});
  }
}

// New memory as handles of at most handle_bytes_ at its two ends and up to twice that between
// them (handles are mapped in this order, at increasing addresses). A freed range can later be
// moved handle by handle, so a small live block pins at most one handle, not a whole growth; the
// ends are where a small block sits beside a large one, and the middle of a large growth is memory
// one large request covers whole: half the driver calls there (each costs per handle).
void vmm_backing::create_pieces(std::size_t bytes, std::vector<piece>& out)
{
  auto const first = out.size();
  auto const edge  = handle_bytes_;
  // The next handle, of `left` bytes still to create: the last edge-sized ones are the high end.
  auto next = [edge, first, &out](std::size_t left) {
    bool const at_end =
        out.size() == first || left <= edge || edge > SIZE_MAX / 3 || left - edge <= 2 * edge;
    return at_end ? std::min(left, edge) : 2 * edge;
  };
  try {
    while (bytes > 0) {
      auto const n = next(bytes);
      out.push_back({runtime_->vmm_create(n, device_, properties_), n, nullptr});
      bytes -= n;
    }
  } catch (...) {
    for (auto i = first; i < out.size(); ++i) { runtime_->vmm_release(out[i].handle); }
    out.resize(first);
    throw;
  }
}

free_block vmm_backing::extend(coalescing_free_list& idle, std::size_t n, bool may_move)
{
  GPUMEM_EXPECTS(!paused_, logic_error,
                 format("vmm_pool_memory_resource: cannot grow by ", bytes_str(n),
                        " while paused (resume first)"));
  auto t             = plan(idle, n);
  auto const percent = may_move ? growth_percent_ : busy_growth_percent_;
  auto const extra   = align_up(mapped_bytes_ / 100 * percent, granularity_);
  std::vector<piece> pieces;
  try {
    pieces = fill(t, may_move ? idle_handles(idle, &t) : std::vector<piece>{}, extra);
  } catch (out_of_memory const& e) {
    GPUMEM_FAIL(out_of_memory, format(e.what(), "; ", describe()));
  }
  return execute(idle, t, pieces);
}

char* vmm_backing::place(free_block const& block, std::size_t n) const noexcept
{
  return unmapped_.contains(block.end()) ? block.ptr : block.end() - n;
}

void vmm_backing::take_out(coalescing_free_list& idle, std::vector<piece> const& pieces)
{
  std::vector<piece> donors;
  for (auto const& p : pieces) {
    if (p.from != nullptr) { donors.push_back(p); }
  }
  std::sort(donors.begin(), donors.end(),
            [](piece const& a, piece const& b) { return a.from < b.from; });
  std::size_t done = 0;
  try {
    for (; done < donors.size(); ++done) {
      auto const& d = donors[done];
      // d's free block as found, or what the last carve left of that block on its right.
      auto holder = d.in;
      if (done > 0 && donors[done - 1].in.ptr == d.in.ptr) {
        char* const start = donors[done - 1].from + donors[done - 1].bytes;
        holder            = {start, static_cast<std::size_t>(d.in.end() - start), d.in.chunk};
      }
      idle.carve(holder, d.from, d.bytes);
    }
  } catch (...) {
    for (std::size_t i = 0; i < done; ++i) {
      idle.insert({donors[i].from, donors[i].bytes, donors[i].in.chunk});
    }
    throw;
  }
}

free_block vmm_backing::execute(coalescing_free_list& idle, target const& t,
                                std::vector<piece>& pieces)
{
  try {
    take_out(idle, pieces);  // host memory only: a failure changes nothing
  } catch (...) {
    for (auto const& p : pieces) {
      if (p.from == nullptr) { runtime_->vmm_release(p.handle); }
    }
    throw;
  }
  // The free neighbours the mapping joins, as they are once the donors are out.
  auto const lo = idle.ending_at(t.at).size;
  auto const hi = idle.starting_at(t.at + t.bytes).size;
  for (auto const& p : pieces) {
    if (p.from != nullptr) {
      note(vmm_mapping_cause::growth, false, p.from, p.bytes, {p.handle}, {p.bytes});
      unmap_donor(p);
    }
  }
  char* at      = t.at;
  std::size_t i = 0;
  try {
    for (; i < pieces.size(); at += pieces[i++].bytes) { map_at(at, pieces[i]); }
    grant(t.at, t.bytes);  // one call per device for the whole target
  } catch (...) {  // unwind: nothing of the target stays mapped; the moved handles are released
    for (std::size_t j = i; j < pieces.size(); ++j) { runtime_->vmm_release(pieces[j].handle); }
    unmap_range(t.at, static_cast<std::size_t>(at - t.at));
    throw;
  }
  idle.insert({t.at, t.bytes, idle_chunk_});
  free_block const joined{t.at - lo, lo + t.bytes + hi, idle_chunk_};
  if (recording_) {
    std::vector<vmm_handle> handles;
    std::vector<std::size_t> sizes;
    try {
      for (auto const& p : pieces) {
        handles.push_back(p.handle);
        sizes.push_back(p.bytes);
      }
    } catch (...) {  // host memory exhausted, the event has none
      handles.clear();
      sizes.clear();
    }
    note(vmm_mapping_cause::growth, true, t.at, t.bytes, std::move(handles), std::move(sizes));
  }
  return joined;
}

void vmm_backing::note(vmm_mapping_cause cause, bool mapped, char* at, std::size_t bytes,
                       std::vector<vmm_handle> handles, std::vector<std::size_t> sizes) noexcept
{
  if (!recording_) { return; }
  try {
    events_.push_back({at, bytes, std::move(handles), cause, mapped, std::move(sizes)});
  } catch (...) {  // NOLINT(bugprone-empty-catch): host memory exhausted: the event is lost
  }
}

void vmm_backing::unmap_donor(piece const& p) noexcept
{
  runtime_->vmm_unmap(p.from, p.bytes);
  mapped_.erase(p.from);
  mapped_bytes_ -= p.bytes;
  add_unmapped(p.from, p.bytes);
}

// Unmaps a free handle and keeps it as a spare, or releases it when the spares are full.
void vmm_backing::retire(piece const& p) noexcept
{
  unmap_donor(p);
  spares_.offer(p.handle, p.bytes);
}

void vmm_backing::map_at(char* at, piece const& p)
{
  runtime_->vmm_map(at, p.bytes, p.handle);
  mapped_.emplace(at, mapping{p.bytes, p.handle});
  mapped_bytes_ += p.bytes;
  take_unmapped(at, p.bytes);
}

void vmm_backing::grant(char* at, std::size_t bytes)
{
  runtime_->vmm_set_access(at, bytes, device_);
  for (int peer : peers_) { runtime_->vmm_set_access(at, bytes, peer); }
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
  if (at + bytes < end) {
    unmapped_.emplace(at + bytes, static_cast<std::size_t>(end - at - bytes));
  }
}

// -- release -------------------------------------------------------------------------------------

std::size_t vmm_backing::release_idle(coalescing_free_list& idle,
                                      std::size_t keep_mapped_bytes) noexcept
{
  if (paused_) { return 0; }  // nothing to give back: a pause gave everything
  try {
    auto handles = idle_handles(idle, nullptr);
    std::sort(handles.begin(), handles.end(),
              [](piece const& a, piece const& b) { return a.bytes > b.bytes; });
    std::vector<piece> gone;
    std::size_t released{};
    for (auto const& h : handles) {
      if (mapped_bytes_ - released <= keep_mapped_bytes) { break; }
      gone.push_back(h);
      released += h.bytes;
    }
    take_out(idle, gone);
    for (auto const& g : gone) {
      note(vmm_mapping_cause::trim, false, g.from, g.bytes, {g.handle}, {g.bytes});
      retire(g);
    }
    return released;
  } catch (...) {  // host memory exhausted while planning: nothing was changed
    return 0;
  }
}

std::size_t vmm_backing::movable_bytes(std::vector<free_block> const& free) const noexcept
{
  std::size_t bytes{};
  for (auto const& b : free) {
    for (auto it = mapped_.lower_bound(b.ptr);
         it != mapped_.end() && it->first + it->second.bytes <= b.end(); ++it) {
      if (it->second.present) { bytes += it->second.bytes; }
    }
  }
  return bytes;
}

// -- invariants ----------------------------------------------------------------------------------

void vmm_backing::check(std::vector<free_block> const& blocks) const
{
  auto fail = [](std::string const& what) {
    GPUMEM_FAIL(logic_error, "vmm_pool_memory_resource: invariant broken: " + what);
  };
  std::size_t sum{};
  std::size_t absent{};
  std::size_t absent_count{};
  for (auto const& [at, m] : mapped_) {
    sum += m.bytes;
    if (!m.present) {
      absent += m.bytes;
      ++absent_count;
    }
    if (staged_ && m.staged + m.bytes > staging_bytes_) {
      fail(format("the mapping at ", static_cast<void*>(at),
                  " is staged beyond the staging buffer"));
    }
  }
  if (sum != mapped_bytes_) { fail(format("mapped_bytes_ ", mapped_bytes_, " != sum ", sum)); }
  if (absent != absent_bytes_ || absent_count != absent_count_) {
    fail(format("absent bytes ", absent_bytes_, " in ", absent_count_, " mappings != sum ", absent,
                " in ", absent_count));
  }
  if (!paused_ && absent_count_ != 0) { fail("mappings without memory while not paused"); }
  if (staged_ && (!paused_ || staging_ == nullptr)) {
    fail("offloaded contents without a pause or without a staging buffer");
  }
  if (file_.is_open() && (!paused_ || staged_ || file_.bytes() < mapped_bytes_)) {
    fail("an offload file open without a pause, beside a host copy, or too small for the layout");
  }
  spares_.check();
  home_.check("vmm_pool_memory_resource");
  for (auto const& h : home_.slots()) {
    if (h.at < base_ || h.at + h.bytes > base_ + reserved_) {
      fail(format("the home slot at ", static_cast<void*>(h.at), " lies outside the reservation"));
    }
  }
  if (paused_ && spares_.count() != 0) { fail("spare handles kept while paused"); }
  for (auto const& [at, m] : mapped_) {
    if (m.present && spares_.holds(m.handle)) {
      fail(format("the mapping at ", static_cast<void*>(at), " is also a spare handle"));
    }
  }
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
    while (p < b.end() && it != mapped_.end() && it->first <= p &&
           p < it->first + it->second.bytes) {
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
