// profile_trace(): one streaming pass learning what does not depend on the resource.
#include <gpumem/trace/pointer_map.hpp>
#include <gpumem/trace/replay.hpp>
#include <gpumem/trace/trace_reader.hpp>

#include <algorithm>

namespace gpumem::trace {
namespace {

void note_id(std::vector<std::uint64_t>& ids, std::uint64_t id)
{
  if (!ids.empty() && ids.back() == id) { return; }
  if (std::find(ids.begin(), ids.end(), id) == ids.end()) { ids.push_back(id); }
}

class profiler {
 public:
  explicit profiler(trace_profile& p) : p_{p} {}

  void apply(event const& e)
  {
    note_id(p_.threads, e.thread);
    note_id(p_.streams, e.stream);
    if (e.act == action::allocate) {
      allocate(e);
    } else if (e.act == action::free) {
      free(e);
    } else {
      ++p_.allocate_failures;
    }
    if (live_ > p_.peak_live_bytes) {
      p_.peak_live_bytes  = live_;
      p_.peak_live_event  = p_.events;
      p_.peak_live_blocks = map_.size();
    }
    ++p_.events;
  }

  void finish() { p_.left_live = map_.size(); }

 private:
  void allocate(event const& e)
  {
    ++p_.allocations;
    live_block stale;
    if (map_.erase(e.pointer, stale)) {
      ++p_.double_allocates;
      live_ -= stale.size;
    }
    map_.insert(e.pointer, {nullptr, e.size, nullptr});
    live_ += e.size;
  }

  void free(event const& e)
  {
    ++p_.frees;
    live_block b;
    if (!map_.erase(e.pointer, b)) {
      ++p_.unknown_frees;
      return;
    }
    if (b.size != e.size) { ++p_.size_mismatches; }
    live_ -= b.size;
  }

  trace_profile& p_;
  pointer_map map_;
  std::size_t live_{};
};

}  // namespace

trace_profile profile_trace(std::string const& path, replay_progress const& progress)
{
  trace_profile p;
  p.path = path;
  profiler prof{p};
  trace_reader reader{path};
  std::vector<event> chunk(std::size_t{1} << 14);
  for (auto n = reader.read(chunk); n != 0; n = reader.read(chunk)) {
    for (std::size_t i = 0; i < n; ++i) { prof.apply(chunk[i]); }
    if (progress.report) { progress.report(reader.bytes_read(), reader.file_bytes()); }
  }
  prof.finish();
  return p;
}

}  // namespace gpumem::trace
