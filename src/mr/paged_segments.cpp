// paged_segments: see include/gpumem/mr/paged_segments.hpp.
#include <gpumem/align.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/paged_segments.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

namespace gpumem::mr {

namespace {

constexpr char const* name = "paged_segments";

/// Adds the time of its scope to a nanosecond counter.
class timed {
 public:
  explicit timed(std::uint64_t& total) noexcept
      : total_{&total}, start_{std::chrono::steady_clock::now()}
  {
  }
  timed(timed const&)            = delete;
  timed& operator=(timed const&) = delete;
  ~timed()
  {
    *total_ += static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                              std::chrono::steady_clock::now() - start_)
                                              .count());
  }

 private:
  std::uint64_t* total_;
  std::chrono::steady_clock::time_point start_;
};

void report(std::string const& what) noexcept
{
  try {
    std::fputs(detail::format("gpumem: ", name, ": ", what, "\n").c_str(), stderr);
  } catch (...) {  // NOLINT(bugprone-empty-catch): a diagnostic must not throw from a free
  }
}

}  // namespace

paged_segments::paged_segments(paged_segments_options options, runtime& rt)
    : runtime_{&rt}, device_{options.device < 0 ? rt.current_device() : options.device}
{
  GPUMEM_EXPECTS(
      options.device >= -1, logic_error,
      detail::format(name, ": device ", options.device,
                     " is not a device number (give one, or -1 for the current device)"));
  GPUMEM_EXPECTS(std::isfinite(options.slack) && options.slack >= 0 && options.slack <= 1e6,
                 logic_error,
                 detail::format(name, ": slack ", options.slack,
                                " must be a fraction of at least 0 (0.02: 2 % of the peak pages)"));
  slack_       = options.slack;
  granularity_ = rt.vmm_granularity(device_);
  GPUMEM_EXPECTS(options.reserve_bytes == 0 || is_aligned(options.reserve_bytes, granularity_),
                 logic_error,
                 detail::format(name, ": reserve of ", options.reserve_bytes,
                                " bytes is not a multiple of the device's granularity (",
                                granularity_, " bytes)"));
  auto const twice  = 2 * rt.memory_info().total_bytes;  // the default, rounded up to pages
  auto const wanted = options.reserve_bytes != 0
                          ? options.reserve_bytes
                          : align_up(std::max(twice, granularity_), granularity_);
  auto const count  = wanted / granularity_;
  GPUMEM_EXPECTS(count < none, logic_error,
                 detail::format(name, ": reserve of ", wanted, " bytes is over ", none - 1,
                                " pages of ", granularity_, " bytes"));
  pages_.resize(count);
  holes_.emplace(0, count);
  base_     = static_cast<char*>(rt.vmm_reserve(wanted, granularity_));
  reserved_ = wanted;
}

paged_segments::~paged_segments()
{
  for (std::uint32_t pg = 0; pg < pages_.size(); ++pg) {
    if (pages_[pg].mapped) { unmap_and_release(pg); }
  }
  for (auto const& e : events_) { runtime_->event_destroy(e.event); }
  runtime_->vmm_unreserve(base_, reserved_);
}

bool paged_segments::owns(void const* ptr) const noexcept
{
  auto const* p = static_cast<char const*>(ptr);
  return p >= base_ && p < base_ + reserved_;
}

// -- segments ------------------------------------------------------------------------------------

void* paged_segments::reserve_segment(std::size_t bytes)
{
  GPUMEM_EXPECTS(bytes > 0, logic_error, detail::format(name, ": a segment of 0 bytes"));
  std::lock_guard lock{mutex_};
  auto const want = bytes / granularity_ + (bytes % granularity_ != 0 ? 1 : 0);
  for (auto it = holes_.begin(); it != holes_.end(); ++it) {  // first fit: the lowest address
    auto const [first, count] = *it;
    if (count < want) { continue; }
    segments_.emplace(first, want);  // may throw: nothing changed yet
    holes_.erase(it);
    if (count > want) { holes_.emplace(first + want, count - want); }
    segment_pages_ += want;
    return address(static_cast<std::uint32_t>(first));
  }
  GPUMEM_FAIL(out_of_memory,
              detail::format(name, ": no room for a segment of ", detail::bytes_str(bytes),
                             " in the ", detail::bytes_str(reserved_), " reserved (",
                             detail::bytes_str(segment_pages_ * granularity_),
                             " in segments); give a larger reserve"));
}

void paged_segments::release_segment(void* ptr, std::size_t bytes) noexcept
{
  std::lock_guard lock{mutex_};
  auto const* p = static_cast<char const*>(ptr);
  auto const it = owns(ptr) && (p - base_) % granularity_ == 0
                      ? segments_.find(static_cast<std::size_t>(p - base_) / granularity_)
                      : segments_.end();
  if (it == segments_.end()) {
    report(detail::format("ignored release of ", detail::ptr_str(ptr), " (", bytes,
                          " bytes): not a segment of this object"));
    return;
  }
  auto const [first, count] = *it;
  for (auto pg = static_cast<std::uint32_t>(first); pg < first + count; ++pg) {
    auto& g = pages_[pg];
    if (g.count != 0) {
      report(detail::format("segment ", detail::ptr_str(ptr), " released with a live block at ",
                            detail::ptr_str(address(pg)), "; its memory is released all the same"));
      live_pages_ -= 1;
      g.count = 0;
    } else if (g.mapped) {
      static_cast<void>(take_free_in_place(pg));  // released just below
    }
    if (g.mapped) { unmap_and_release(pg); }
  }
  segments_.erase(it);
  segment_pages_ -= count;
  // the hole, joined with its neighbours (erase and emplace of map nodes: emplace may throw only
  // for host memory; the hole is then lost to later segments, nothing else)
  auto start = first;
  auto len   = count;
  if (auto next = holes_.find(first + count); next != holes_.end()) {
    len += next->second;
    holes_.erase(next);
  }
  if (auto prev = holes_.lower_bound(first); prev != holes_.begin()) {
    --prev;
    if (prev->first + prev->second == first) {
      start = prev->first;
      len += prev->second;
      holes_.erase(prev);
    }
  }
  try {
    holes_.emplace(start, len);
  } catch (...) {
    report("no host memory to record a released segment's address space");
  }
}

std::pair<std::uint32_t, std::uint32_t> paged_segments::pages_of(void const* ptr,
                                                                 std::size_t bytes) const
{
  auto const* p = static_cast<char const*>(ptr);
  GPUMEM_EXPECTS(bytes > 0 && owns(ptr) && bytes <= reserved_ - static_cast<std::size_t>(p - base_),
                 logic_error,
                 detail::format(name, ": ", detail::ptr_str(ptr), " (", bytes,
                                " bytes) is not inside this object's address range"));
  auto const first = static_cast<std::size_t>(p - base_) / granularity_;
  auto const last  = (static_cast<std::size_t>(p - base_) + bytes - 1) / granularity_;
  auto it          = segments_.upper_bound(first);
  GPUMEM_EXPECTS(it != segments_.begin() && (--it, last < it->first + it->second), logic_error,
                 detail::format(name, ": ", detail::ptr_str(ptr), " (", bytes,
                                " bytes) is not inside one live segment"));
  return {static_cast<std::uint32_t>(first), static_cast<std::uint32_t>(last)};
}

// -- backing
// ---------------------------------------------------------------------------------------

void paged_segments::back(void const* ptr, std::size_t bytes, cudaStream_t stream)
{
  std::lock_guard lock{mutex_};
  timed const time{back_ns_};
  auto const [first, last] = pages_of(ptr, bytes);
  bool const capturing     = runtime_->stream_capturing(stream);
  auto const span          = last - first + 1;
  std::vector<std::uint32_t> mapped;  // pages this call mapped, for the access grant and undo
  std::vector<taken_page> taken;      // pages taken in place, for undo
  std::vector<vmm_handle> handles;    // handles of moved pages not yet mapped again
  mapped.reserve(span);
  taken.reserve(span);
  handles.reserve(span);
  // Pages mapped and free are taken in place first, so that a move below never takes one of them.
  std::size_t becoming_live{};
  for (auto pg = first; pg <= last; ++pg) {
    becoming_live += pages_[pg].count == 0 ? 1 : 0;
    if (pages_[pg].mapped && pages_[pg].count == 0) { taken.push_back(take_free_in_place(pg)); }
  }
  auto const unmapped = span - static_cast<std::size_t>(
                                   std::count_if(pages_.begin() + first, pages_.begin() + last + 1,
                                                 [](page const& g) { return g.mapped; }));
  if (!capturing) { take_victims(unmapped, live_pages_ + becoming_live, handles); }
  auto pg = first;
  try {
    for (; pg <= last; ++pg) {
      auto& g = pages_[pg];
      if (!g.mapped) {
        map_page(pg, handles);
        mapped.push_back(pg);
      }
      if (g.count++ == 0) { add_live(); }
    }
    grant(mapped);
  } catch (out_of_memory const& e) {
    undo_back(first, pg, mapped, taken, handles);
    GPUMEM_FAIL(out_of_memory,
                detail::format(e.what(), " (", name, " backing ", detail::bytes_str(bytes), " at ",
                               detail::ptr_str(ptr), ": ",
                               detail::bytes_str(mapped_pages_ * granularity_), " backed, ",
                               detail::bytes_str(live_pages_ * granularity_), " in live pages)"));
  } catch (...) {
    undo_back(first, pg, mapped, taken, handles);
    throw;
  }
  for (auto const& t : taken) {  // in use again: nothing of their free to wait for
    drop_event(pages_[t.page].event);
    pages_[t.page].event = none;
  }
}

// Up to `need` free pages, oldest first, while the free pages exceed the slack of the peak of
// live pages (`live_after`: the live pages once this back() is done), each once its work has
// finished: unmapped (side-by-side pages in one call) and their handles appended to `out`.
void paged_segments::take_victims(std::size_t need, std::size_t live_after,
                                  std::vector<vmm_handle>& out) noexcept
{
  auto const peak = static_cast<double>(std::max(peak_live_pages_, live_after));
  auto const from = out.size();
  while (out.size() - from < need && movable_free_ > 0 &&
         static_cast<double>(movable_free_ + pinned_free_) > slack_ * peak) {
    auto const pg = free_head_;
    if (!wait_for(pages_[pg])) { break; }  // its work cannot be waited for: new memory instead
    unlink_free(pg);
    out.push_back(pg);  // the page for now (capacity reserved by back()); its handle below
  }
  auto first = out.begin() + static_cast<std::ptrdiff_t>(from);
  std::sort(first, out.end());
  for (auto i = first; i != out.end();) {  // one unmap per run of pages side by side
    auto j = i + 1;
    while (j != out.end() && *j == *(j - 1) + 1) { ++j; }
    auto const run = static_cast<std::size_t>(j - i);
    if (run == 1 ||
        !runtime_->vmm_unmap_run(address(static_cast<std::uint32_t>(*i)), run * granularity_)) {
      for (auto k = i; k != j; ++k) {
        runtime_->vmm_unmap(address(static_cast<std::uint32_t>(*k)), granularity_);
      }
    }
    i = j;
  }
  for (auto i = first; i != out.end(); ++i) {
    auto& g  = pages_[static_cast<std::uint32_t>(*i)];
    g.mapped = false;
    --mapped_pages_;
    *i = g.handle;
  }
  moved_ += out.size() - from;
}

// A free page (mapped, count 0) that back() takes in place: out of the free list (or off its
// pin); it keeps its event until back() succeeds.
paged_segments::taken_page paged_segments::take_free_in_place(std::uint32_t pg) noexcept
{
  auto& g              = pages_[pg];
  taken_page const out = {pg, g.pinned};
  if (g.pinned) {
    g.pinned = false;
    --pinned_free_;
  } else {
    unlink_free(pg);
  }
  return out;
}

// back() failed having counted pages [first, done): they are counted off again, the pages it
// mapped given back, and the pages it took in place free again as they were (event, pin).
void paged_segments::undo_back(std::uint32_t first, std::uint32_t done,
                               std::vector<std::uint32_t> const& mapped,
                               std::vector<taken_page> const& taken,
                               std::vector<vmm_handle> const& handles) noexcept
{
  for (auto h : handles) {  // moved, not mapped again: given back
    runtime_->vmm_release(h);
    ++released_;
  }
  for (auto pg = first; pg < done; ++pg) {
    if (--pages_[pg].count == 0) { --live_pages_; }
  }
  for (auto pg : mapped) { unmap_and_release(pg); }  // count 0 again: only back() counted them
  for (auto const& t : taken) {
    if (t.pinned) {
      pages_[t.page].pinned = true;
      ++pinned_free_;
    } else {
      link_free(t.page);
    }
  }
}

// Maps a page with a moved page's handle from `handles`, else a new one. A handle that fails to
// map is released.
void paged_segments::map_page(std::uint32_t pg, std::vector<vmm_handle>& handles)
{
  vmm_handle h{};
  if (handles.empty()) {
    h = runtime_->vmm_create(granularity_, device_, {});
    ++created_;
  } else {
    h = handles.back();
    handles.pop_back();
  }
  try {
    runtime_->vmm_map(address(pg), granularity_, h);
  } catch (...) {
    runtime_->vmm_release(h);
    ++released_;
    throw;
  }
  pages_[pg].mapped = true;
  pages_[pg].handle = h;
  ++mapped_pages_;
}

void paged_segments::grant(std::vector<std::uint32_t> const& mapped)
{
  // one grant per run of pages mapped side by side
  for (std::size_t i = 0; i < mapped.size();) {
    auto j = i + 1;
    while (j < mapped.size() && mapped[j] == mapped[j - 1] + 1) { ++j; }
    runtime_->vmm_set_access(address(mapped[i]), (j - i) * granularity_, device_);
    i = j;
  }
}

void paged_segments::add_live() noexcept
{
  ++live_pages_;
  peak_live_pages_ = std::max(peak_live_pages_, live_pages_);
}

// -- freeing -------------------------------------------------------------------------------------

void paged_segments::unback(void const* ptr, std::size_t bytes, cudaStream_t stream) noexcept
{
  std::lock_guard lock{mutex_};
  timed const time{unback_ns_};
  std::pair<std::uint32_t, std::uint32_t> range;
  try {
    range = pages_of(ptr, bytes);
  } catch (...) {
    report(detail::format("ignored free of ", detail::ptr_str(ptr), " (", bytes,
                          " bytes): not inside one live segment"));
    return;
  }
  bool const capturing = runtime_->stream_capturing(stream);
  auto event           = none;
  bool recorded        = false;
  for (auto pg = range.first; pg <= range.second; ++pg) {
    auto& g = pages_[pg];
    if (g.count == 0) {
      report(detail::format("ignored free of a page no live block touches at ",
                            detail::ptr_str(address(pg))));
      continue;
    }
    if (--g.count != 0) { continue; }
    --live_pages_;
    if (capturing) {  // a graph may use it again: kept until back() takes it in place
      g.pinned = true;
      ++pinned_free_;
      continue;
    }
    if (!recorded) {
      event    = record_event(stream);
      recorded = true;
    }
    push_free(pg, event);
  }
}

std::uint32_t paged_segments::record_event(cudaStream_t stream) noexcept
{
  std::uint32_t slot = none;
  try {
    if (spare_events_.empty()) {
      events_.reserve(events_.size() + 1);
      spare_events_.reserve(events_.size() + 1);
      events_.push_back({runtime_->event_create(), 0});
      slot = static_cast<std::uint32_t>(events_.size() - 1);
    } else {
      slot = spare_events_.back();
      spare_events_.pop_back();
    }
    runtime_->event_record(events_[slot].event, stream);
    return slot;
  } catch (...) {
    // no event: wait here for the stream's work instead, so the pages need no waiting later
    if (slot != none) { spare_events_.push_back(slot); }  // capacity reserved above
    try {
      runtime_->stream_synchronize(stream);
    } catch (...) {
      try {
        runtime_->device_synchronize();
      } catch (...) {  // NOLINT(bugprone-empty-catch): nothing left to wait with
        report("could not wait for a freed block's work; its pages are freed as they are");
      }
    }
    return none;
  }
}

void paged_segments::push_free(std::uint32_t pg, std::uint32_t event) noexcept
{
  pages_[pg].event = event;
  if (event != none) { ++events_[event].pages; }
  link_free(pg);
}

// Appends a free page (its event set) to the free list: the newest.
void paged_segments::link_free(std::uint32_t pg) noexcept
{
  auto& g = pages_[pg];
  g.prev  = free_tail_;
  g.next  = none;
  if (free_tail_ != none) {
    pages_[free_tail_].next = pg;
  } else {
    free_head_ = pg;
  }
  free_tail_ = pg;
  ++movable_free_;
}

void paged_segments::unlink_free(std::uint32_t pg) noexcept
{
  auto& g = pages_[pg];
  if (g.prev != none) {
    pages_[g.prev].next = g.next;
  } else {
    free_head_ = g.next;
  }
  if (g.next != none) {
    pages_[g.next].prev = g.prev;
  } else {
    free_tail_ = g.prev;
  }
  g.prev = g.next = none;
  --movable_free_;
}

bool paged_segments::wait_for(page& g) noexcept
{
  if (g.event == none) { return true; }
  auto const e = events_[g.event].event;
  try {
    if (!runtime_->event_query(e)) {
      ++waited_;
      runtime_->event_synchronize(e);
    }
  } catch (...) {  // e.g. a CUDA graph being captured in global mode: no query allowed
    return false;
  }
  drop_event(g.event);
  g.event = none;
  return true;
}

void paged_segments::drop_event(std::uint32_t event) noexcept
{
  if (event == none) { return; }
  if (--events_[event].pages == 0) { spare_events_.push_back(event); }  // capacity reserved
}

void paged_segments::unmap_and_release(std::uint32_t pg) noexcept
{
  auto& g = pages_[pg];
  if (!wait_for(g)) {
    report(detail::format("could not wait for the work on the freed page at ",
                          detail::ptr_str(address(pg)), "; released after a device synchronize"));
    try {
      runtime_->device_synchronize();
    } catch (...) {  // NOLINT(bugprone-empty-catch): nothing left to wait with
    }
    drop_event(g.event);
    g.event = none;
  }
  runtime_->vmm_unmap(address(pg), granularity_);
  runtime_->vmm_release(g.handle);
  g.mapped = false;
  --mapped_pages_;
  ++released_;
}

std::size_t paged_segments::trim() noexcept
{
  std::lock_guard lock{mutex_};
  std::size_t bytes{};
  while (free_head_ != none) {
    auto const pg = free_head_;
    unlink_free(pg);
    unmap_and_release(pg);
    bytes += granularity_;
  }
  return bytes;
}

// -- observing -----------------------------------------------------------------------------------

paged_segments_stats paged_segments::stats() const
{
  std::lock_guard lock{mutex_};
  paged_segments_stats st;
  st.granularity     = granularity_;
  st.segments        = segments_.size();
  st.segment_bytes   = segment_pages_ * granularity_;
  st.backed_bytes    = mapped_pages_ * granularity_;
  st.live_pages      = live_pages_;
  st.peak_live_pages = peak_live_pages_;
  st.free_pages      = movable_free_ + pinned_free_;
  st.created         = created_;
  st.moved           = moved_;
  st.waited          = waited_;
  st.released        = released_;
  st.back_seconds    = static_cast<double>(back_ns_) * 1e-9;
  st.unback_seconds  = static_cast<double>(unback_ns_) * 1e-9;
  return st;
}

void paged_segments::check_invariants() const
{
  std::lock_guard lock{mutex_};
  auto fail = [](std::string const& what) {
    GPUMEM_FAIL(logic_error, detail::format(name, ": ", what));
  };
  std::vector<bool> in_segment(pages_.size());
  std::size_t last_end = 0;
  std::size_t seg_pages{};
  for (auto const& [first, count] : segments_) {
    if (first < last_end) { fail("segments overlap"); }
    last_end = first + count;
    seg_pages += count;
    for (auto pg = first; pg < first + count; ++pg) { in_segment[pg] = true; }
  }
  if (seg_pages != segment_pages_) { fail("segment page count differs from the segments"); }
  std::size_t live{}, mapped{}, free{}, pinned{};
  for (std::size_t pg = 0; pg < pages_.size(); ++pg) {
    auto const& g = pages_[pg];
    if (g.count > 0) {
      ++live;
      if (!g.mapped) { fail(detail::format("live page ", pg, " is not mapped")); }
    }
    if (g.mapped) {
      ++mapped;
      if (!in_segment[pg]) { fail(detail::format("mapped page ", pg, " is in no segment")); }
      if (g.count == 0) { ++free; }
      if (g.count == 0 && g.pinned) { ++pinned; }
    }
  }
  std::size_t listed{};
  auto prev = none;
  for (auto pg = free_head_; pg != none; pg = pages_[pg].next) {
    auto const& g = pages_[pg];
    if (!g.mapped || g.count != 0 || g.pinned || g.prev != prev) {
      fail(detail::format("free list holds page ", pg, " that is not free and mapped"));
    }
    prev = pg;
    if (++listed > pages_.size()) { fail("free list loops"); }
  }
  if (prev != free_tail_) { fail("free list's tail is not its last page"); }
  if (live != live_pages_) { fail(detail::format("live pages ", live_pages_, " != ", live)); }
  if (mapped != mapped_pages_) {
    fail(detail::format("mapped pages ", mapped_pages_, " != ", mapped));
  }
  if (listed != movable_free_ || pinned != pinned_free_ || free != listed + pinned) {
    fail(detail::format("free pages ", movable_free_, " movable and ", pinned_free_,
                        " pinned != ", free, " mapped with no live block (", listed, " listed, ",
                        pinned, " pinned)"));
  }
  if (peak_live_pages_ < live_pages_) { fail("peak of live pages below live pages"); }
}

}  // namespace gpumem::mr
