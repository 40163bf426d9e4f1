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
  if (p_.events == 0) { first_time_ = e.time; }
  last_time_ = e.time;
  timeline_.add({live_, e.time > first_time_ ? e.time - first_time_ : 0});
  ++p_.events;
  return c;
}

void profiler::finish()
{
  p_.left_live = map_.size();
  p_.slots     = next_slot_;
  timeline_.finish();
  bool const timed = last_time_ != first_time_;
  for (auto const& [event, live, time] : timeline_.samples()) {
    p_.live_timeline.push_back({event, live});
    if (timed) { p_.time_us.push_back({event, time}); }
  }
}

void profiler::log_allocate(event const& e, std::uint32_t slot)
{
  if (p_.allocations_omitted) { return; }
  if (p_.allocation_log.size() == max_recorded_allocations) {
    p_.allocations_omitted = true;
    p_.allocation_log      = {};
    record_of_slot_        = {};
    return;
  }
  if (slot >= record_of_slot_.size()) { record_of_slot_.resize(slot + std::size_t{1}); }
  record_of_slot_[slot] = p_.allocation_log.size();
  p_.allocation_log.push_back({p_.events, -1, e.size, stack_of(e.frames)});
}

void profiler::log_free(std::uint32_t slot)
{
  if (p_.allocations_omitted) { return; }
  p_.allocation_log[record_of_slot_[slot]].free_event = static_cast<std::int64_t>(p_.events);
}

std::int32_t profiler::stack_of(std::string const& frames)
{
  if (frames.empty()) { return -1; }
  if (auto it = stack_index_.find(frames); it != stack_index_.end()) { return it->second; }
  std::vector<std::uint32_t> stack;
  std::string_view rest{frames};
  for (;;) {
    auto const bar = rest.find(frame_separator);
    stack.push_back(frame_of(rest.substr(0, bar)));
    if (bar == std::string_view::npos) { break; }
    rest.remove_prefix(bar + 1);
  }
  auto const index = static_cast<std::int32_t>(p_.stacks.size());
  p_.stacks.push_back(std::move(stack));
  stack_index_.emplace(frames, index);
  return index;
}

std::uint32_t profiler::frame_of(std::string_view frame)
{
  std::string text{frame};
  if (auto it = frame_index_.find(text); it != frame_index_.end()) { return it->second; }
  auto const index = static_cast<std::uint32_t>(p_.frames.size());
  p_.frames.push_back(text);
  frame_index_.emplace(std::move(text), index);
  return index;
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
    log_free(slot);
  } else if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = next_slot_++;
  }
  map_.insert(e.pointer, {e.size, slot});
  log_allocate(e, slot);
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
  log_free(b.slot);
  free_slots_.push_back(b.slot);
  c = {b.size, b.slot, c.line, c.stream, c.thread, compact_event::free};
}

}  // namespace gpumem::trace
