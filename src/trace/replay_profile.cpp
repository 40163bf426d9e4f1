// profile_trace(): the one parse of a trace; learns what does not depend on the resource and
// writes the compact, resolved events that every replay reads.
#include <gpumem/detail/format.hpp>
#include <gpumem/trace/pointer_map.hpp>
#include <gpumem/trace/replay.hpp>
#include <gpumem/trace/trace_reader.hpp>

#include <algorithm>
#include <chrono>
#include <limits>

namespace gpumem::trace {
namespace {

class profiler {
 public:
  profiler(trace_profile& p, trace_reader const& reader) : p_{p}, reader_{reader} {}

  void apply(event const& e)
  {
    compact_event c;
    c.thread = index_of(p_.threads, e.thread, last_thread_, "threads");
    c.stream = index_of(p_.streams, e.stream, last_stream_, "streams");
    c.line   = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(e.line, std::numeric_limits<std::uint32_t>::max()));
    if (e.act == action::allocate) {
      allocate(e, c);
    } else if (e.act == action::free) {
      free(e, c);
    } else {
      ++p_.allocate_failures;
    }
    p_.compact->append(c);
    if (live_ > p_.peak_live_bytes) {
      p_.peak_live_bytes  = live_;
      p_.peak_live_event  = p_.events;
      p_.peak_live_blocks = map_.size();
    }
    ++p_.events;
  }

  void finish()
  {
    p_.left_live = map_.size();
    p_.slots     = next_slot_;
    p_.compact->finish();
  }

 private:
  /// The index of `id` in `ids` (appended when new); `last` caches the previous answer.
  std::uint16_t index_of(std::vector<std::uint64_t>& ids, std::uint64_t id, std::size_t& last,
                         char const* what)
  {
    if (last < ids.size() && ids[last] == id) { return static_cast<std::uint16_t>(last); }
    auto it = std::find(ids.begin(), ids.end(), id);
    if (it == ids.end()) {
      if (ids.size() == std::numeric_limits<std::uint16_t>::max()) {
        throw trace_error{p_.path, reader_.line(),
                          detail::format("at most 65535 distinct ", what, " in a trace")};
      }
      it = ids.insert(ids.end(), id);
    }
    last = static_cast<std::size_t>(it - ids.begin());
    return static_cast<std::uint16_t>(last);
  }

  void allocate(event const& e, compact_event& c)
  {
    ++p_.allocations;
    live_block stale;
    std::uint32_t slot = 0;
    if (map_.erase(e.pointer, stale)) {  // same slot: the replayer frees the stale block first
      ++p_.double_allocates;
      live_ -= stale.size;
      slot = static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(stale.ptr));
    } else if (!free_slots_.empty()) {
      slot = free_slots_.back();
      free_slots_.pop_back();
    } else {
      slot = next_slot_++;
    }
    map_.insert(e.pointer, {reinterpret_cast<void*>(std::uintptr_t{slot}), e.size, nullptr});
    live_ += e.size;
    c = {e.size, slot, c.line, c.stream, c.thread, compact_event::allocate};
  }

  void free(event const& e, compact_event& c)
  {
    ++p_.frees;
    live_block b;
    if (!map_.erase(e.pointer, b)) {
      ++p_.unknown_frees;
      return;
    }
    if (b.size != e.size) { ++p_.size_mismatches; }
    live_ -= b.size;
    auto const slot = static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(b.ptr));
    free_slots_.push_back(slot);
    c = {b.size, slot, c.line, c.stream, c.thread, compact_event::free};
  }

  trace_profile& p_;
  trace_reader const& reader_;
  pointer_map map_;  ///< traced pointer -> {slot (as ptr), size}
  std::vector<std::uint32_t> free_slots_;
  std::uint32_t next_slot_{};
  std::size_t live_{};
  std::size_t last_thread_{};
  std::size_t last_stream_{};
};

}  // namespace

trace_profile profile_trace(std::string const& path, replay_progress const& progress)
{
  auto const t0 = std::chrono::steady_clock::now();
  trace_profile p;
  p.path    = path;
  p.compact = std::make_shared<compact_trace>();
  trace_reader reader{path};
  profiler prof{p, reader};
  std::vector<event> chunk(std::size_t{1} << 14);
  for (auto n = reader.read(chunk); n != 0; n = reader.read(chunk)) {
    for (std::size_t i = 0; i < n; ++i) { prof.apply(chunk[i]); }
    if (progress.report) { progress.report(reader.bytes_read(), reader.file_bytes()); }
  }
  prof.finish();
  p.parse_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return p;
}

}  // namespace gpumem::trace
