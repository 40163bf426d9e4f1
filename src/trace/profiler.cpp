// profiler: what a trace is, learned event by event (see profiler.hpp).
#include "profiler.hpp"

#include <gpumem/detail/format.hpp>
#include <gpumem/trace/trace_reader.hpp>

#include <algorithm>
#include <limits>

namespace gpumem::trace {

compact_event profiler::apply(event const& e)
{
  compact_event c;
  line_    = e.line;
  c.thread = index_of(p_.threads, thread_index_, e.thread, last_thread_, "threads");
  c.stream = index_of(p_.streams, stream_index_, e.stream, last_stream_, "streams");
  c.line   = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(e.line, std::numeric_limits<std::uint32_t>::max()));
  if (e.act == action::allocate) {
    allocate(e, c);
  } else if (e.act == action::free) {
    free(e, c);
  } else {
    ++p_.allocate_failures;
  }
  if (live_ > p_.peak_live_bytes) {
    p_.peak_live_bytes  = live_;
    p_.peak_live_event  = p_.events;
    p_.peak_live_blocks = map_.size();
  }
  ++p_.events;
  return c;
}

void profiler::finish()
{
  p_.left_live = map_.size();
  p_.slots     = next_slot_;
}

std::uint16_t profiler::index_of(std::vector<std::uint64_t>& ids,
                                 std::unordered_map<std::uint64_t, std::uint16_t>& index,
                                 std::uint64_t id, std::size_t& last, char const* what)
{
  if (last < ids.size() && ids[last] == id) { return static_cast<std::uint16_t>(last); }
  auto it = index.find(id);
  if (it == index.end()) {
    if (ids.size() == std::numeric_limits<std::uint16_t>::max()) {
      throw trace_error{p_.path, line_,
                        detail::format("at most 65535 distinct ", what, " in a trace")};
    }
    it = index.emplace(id, static_cast<std::uint16_t>(ids.size())).first;
    ids.push_back(id);
  }
  last = it->second;
  return it->second;
}

void profiler::allocate(event const& e, compact_event& c)
{
  ++p_.allocations;
  block stale;
  std::uint32_t slot = 0;
  if (map_.erase(e.pointer, stale)) {  // same slot: the replayer frees the stale block first
    ++p_.double_allocates;
    live_ -= stale.size;
    slot = stale.slot;
  } else if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = next_slot_++;
  }
  map_.insert(e.pointer, {e.size, slot});
  live_ += e.size;
  c = {e.size, slot, c.line, c.stream, c.thread, compact_event::allocate};
}

void profiler::free(event const& e, compact_event& c)
{
  ++p_.frees;
  block b;
  if (!map_.erase(e.pointer, b)) {
    ++p_.unknown_frees;
    return;
  }
  if (b.size != e.size) { ++p_.size_mismatches; }
  live_ -= b.size;
  free_slots_.push_back(b.slot);
  c = {b.size, b.slot, c.line, c.stream, c.thread, compact_event::free};
}

}  // namespace gpumem::trace
