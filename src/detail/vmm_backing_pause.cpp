// Pausing and resuming a reserved range's physical memory. See detail/vmm_backing.hpp and
// docs/design.md ("vmm_pool", "Pause and resume").
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/vmm_backing.hpp>
#include <gpumem/error.hpp>

#include <array>
#include <optional>

namespace gpumem::detail {

std::vector<vmm_backing::run> vmm_backing::present_runs() const
{
  std::vector<run> runs;
  for (auto const& [at, m] : mapped_) {
    if (!m.present) { continue; }
    if (runs.empty() || runs.back().at + runs.back().bytes != at) {
      runs.push_back({at, 0, {}, {}});
    }
    runs.back().bytes += m.bytes;
    runs.back().handles.push_back(m.handle);
    runs.back().sizes.push_back(m.bytes);
  }
  return runs;
}

void vmm_backing::pause(pause_mode mode, cudaStream_t stream)
{
  GPUMEM_EXPECTS(!paused_, logic_error, "vmm_pool_memory_resource: already paused");
  constexpr std::size_t chunk_bytes = std::size_t{64} << 20;  // per copy while offloading
  auto const copied                 = mode != pause_mode::discard && !mapped_.empty();
  auto const order = chunks(copied ? chunk_bytes : SIZE_MAX);  // may throw: nothing changed
  if (copied) {
    auto const to_file = mode == pause_mode::offload_to_file;
    if (to_file) {
      file_.create(offload_directory_, mapped_bytes_);  // may throw: nothing changed
      try {
        ensure_staging(file_ring_bytes());
      } catch (...) {  // no pinned memory: nothing changed
        file_.close();
        throw;
      }
    } else {
      ensure_staging(mapped_bytes_);  // may throw: nothing changed
    }
    std::size_t offset{};
    for (auto& [at, m] : mapped_) {  // address order: a run of mappings is a run of the copy
      m.staged = offset;
      offset += m.bytes;
    }
    spares_.release_all();  // a pause gives back everything
    paused_ = true;
    staged_ = !to_file;
    if (to_file) {
      write_all(order, stream);
    } else {
      offload_all(order, stream);
    }
    return;
  }
  spares_.release_all();
  paused_ = true;
  for (auto const& c : order) { give_back(c); }
}

// Adjacent mappings in groups of at most `limit` bytes (at least one mapping each), in address
// order: a group is copied with one call and unmapped with one call where the runtime can.
std::vector<vmm_backing::chunk> vmm_backing::chunks(std::size_t limit) const
{
  std::vector<chunk> out;
  for (auto it = mapped_.begin(); it != mapped_.end(); ++it) {
    if (!it->second.present) { continue; }
    auto* last = out.empty() ? nullptr : &out.back();
    if (last != nullptr && last->at + last->bytes == it->first && last->bytes < limit &&
        it->second.bytes <= limit - last->bytes) {
      last->bytes += it->second.bytes;
      ++last->count;
    } else {
      out.push_back({it->first, it->second.bytes, 1});
    }
  }
  return out;
}

void vmm_backing::give_back(chunk const& c) noexcept
{
  auto it = mapped_.find(c.at);
  if (c.count > 1 && runtime_->vmm_unmap_run(c.at, c.bytes)) {
    for (std::size_t i = 0; i < c.count; ++i, ++it) { forget_handle(it->second); }
    return;
  }
  for (std::size_t i = 0; i < c.count; ++i, ++it) { drop(it->second, it->first); }
}

void vmm_backing::ensure_staging(std::size_t bytes)
{
  if (staging_bytes_ >= bytes) { return; }
  release_staging();
  staging_       = runtime_->allocate(memory_kind::pinned_host, bytes);
  staging_bytes_ = bytes;
}

void vmm_backing::release_staging() noexcept
{
  if (staged_ || staging_ == nullptr) { return; }
  runtime_->free(memory_kind::pinned_host, staging_);
  staging_       = nullptr;
  staging_bytes_ = 0;
}

// Copies the chunks to the staging buffer on `stream`, one call per chunk with an event after it,
// and gives each chunk back as soon as its copy is done while the next copies run: at most `depth`
// chunks are queued ahead of the unmaps. A failed copy puts back what was given back (copied back
// from the host), so the pool is as before.
void vmm_backing::offload_all(std::vector<chunk> const& order, cudaStream_t stream)
{
  constexpr std::size_t depth = 4;
  std::array<cudaEvent_t, depth> events{};
  auto destroy_events = [&]() noexcept {
    for (auto& e : events) {
      if (e != nullptr) { runtime_->event_destroy(e); }
      e = nullptr;
    }
  };
  auto* const host    = static_cast<char*>(staging_);
  std::size_t issued  = 0;
  std::size_t dropped = 0;
  auto drop_next      = [&] {
    runtime_->event_synchronize(events[dropped % depth]);
    give_back(order[dropped]);
    ++dropped;
  };
  try {
    for (auto& e : events) { e = runtime_->event_create(); }
    for (; issued < order.size(); ++issued) {
      auto const& c = order[issued];
      runtime_->memcpy_async(host + mapped_.find(c.at)->second.staged, c.at, c.bytes, stream);
      runtime_->event_record(events[issued % depth], stream);
      if (issued + 1 - dropped == depth) { drop_next(); }
    }
    while (dropped < issued) { drop_next(); }
  } catch (...) {
    destroy_events();
    undo_pause(dropped, stream);
    throw;
  }
  destroy_events();
}

// After a failed offload: no copy may still read what is put back; then, when `given_back`
// chunks were given back, they are mapped and copied back again (if that fails too, the backing
// stays paused with its copy, and resume() finishes the job); else it is as before the pause.
void vmm_backing::undo_pause(std::size_t given_back, cudaStream_t stream) noexcept
{
  try {
    runtime_->stream_synchronize(stream);
  } catch (...) {  // NOLINT(bugprone-empty-catch): the first error is the one reported
  }
  if (given_back == 0) {
    paused_ = false;
    staged_ = false;
    file_.close();
    return;
  }
  try {
    (void)resume(stream, true);
  } catch (...) {  // NOLINT(bugprone-empty-catch): stays paused with its copy
  }
}

void vmm_backing::drop(mapping& m, char* at) noexcept
{
  runtime_->vmm_unmap(at, m.bytes);
  forget_handle(m);
}

void vmm_backing::forget_handle(mapping& m) noexcept
{
  runtime_->vmm_release(m.handle);
  m.handle  = 0;
  m.present = false;
  absent_bytes_ += m.bytes;
  ++absent_count_;
}

std::vector<vmm_backing::run> vmm_backing::resume(cudaStream_t stream, bool keep_staging)
{
  GPUMEM_EXPECTS(paused_, logic_error, "vmm_pool_memory_resource: not paused");
  std::vector<char*> done;
  done.reserve(absent_count_);  // host memory first: unwinding needs the list
  std::optional<pinned_ring> ring;
  if (file_.is_open()) {  // the slots the file is read into (may throw: nothing changed)
    ensure_staging(file_ring_bytes());
    ring.emplace(*runtime_, staging_, file_ring_bytes() / file_slots, file_slots);
  }
  auto const copies = staged_ || ring.has_value();
  try {
    for (auto it = mapped_.begin(); it != mapped_.end();) {
      it = it->second.present ? std::next(it)
                              : map_absent_run(it, done, stream, ring ? &*ring : nullptr);
    }
    if (copies && !done.empty()) { runtime_->stream_synchronize(stream); }
  } catch (...) {
    try {
      if (copies) { runtime_->stream_synchronize(stream); }  // no copy may still write there
    } catch (...) {  // NOLINT(bugprone-empty-catch): the first error is the one reported
    }
    unmap_again(done);
    throw;
  }
  ring.reset();
  file_.close();
  paused_ = false;
  staged_ = false;
  if (!keep_staging) { release_staging(); }
  try {
    return runs_of(done);
  } catch (...) {  // host memory exhausted: the memory is back, the listeners hear nothing
    return {};
  }
}

std::vector<vmm_backing::run> vmm_backing::runs_of(std::vector<char*> const& addresses) const
{
  std::vector<run> runs;
  for (char* at : addresses) {
    auto const& m = mapped_.at(at);
    if (runs.empty() || runs.back().at + runs.back().bytes != at) {
      runs.push_back({at, 0, {}, {}});
    }
    runs.back().bytes += m.bytes;
    runs.back().handles.push_back(m.handle);
    runs.back().sizes.push_back(m.bytes);
  }
  return runs;
}

// Maps the run of adjacent absent mappings starting at `first` (new handles), grants access once
// over the run, and queues the copy back of its offloaded bytes. Returns the end of the run.
std::map<char*, vmm_backing::mapping>::iterator vmm_backing::map_absent_run(
    std::map<char*, mapping>::iterator first, std::vector<char*>& done, cudaStream_t stream,
    pinned_ring* ring)
{
  char* const start = first->first;
  std::size_t bytes{};
  auto it = first;
  for (; it != mapped_.end() && !it->second.present && it->first == start + bytes; ++it) {
    auto& m           = it->second;
    auto const handle = runtime_->vmm_create(m.bytes, device_, properties_);
    try {
      runtime_->vmm_map(it->first, m.bytes, handle);
    } catch (...) {
      runtime_->vmm_release(handle);
      throw;
    }
    m.handle  = handle;
    m.present = true;
    absent_bytes_ -= m.bytes;
    --absent_count_;
    done.push_back(it->first);  // reserved: cannot throw
    bytes += m.bytes;
  }
  grant(start, bytes);
  if (ring != nullptr) {  // in address order: the run is one range of the file too
    read_back(*ring, start, first->second.staged, bytes, stream);
  } else if (staged_) {  // staged in address order: one range of the staging buffer too
    auto const* host = static_cast<char const*>(staging_);
    runtime_->memcpy_async(start, host + first->second.staged, bytes, stream);
  }
  return it;
}

void vmm_backing::unmap_again(std::vector<char*> const& done) noexcept
{
  for (char* at : done) { drop(mapped_.find(at)->second, at); }
}

}  // namespace gpumem::detail
