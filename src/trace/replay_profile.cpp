// profile_trace(): the one parse of a trace; learns what does not depend on the resource and
// writes the compact, resolved events that every replay reads.
#include <gpumem/detail/format.hpp>
#include <gpumem/trace/pointer_map.hpp>
#include <gpumem/trace/replay.hpp>
#include <gpumem/trace/trace_reader.hpp>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <chrono>
#include <limits>

namespace gpumem::trace {
namespace {

class profiler {
 public:
  explicit profiler(trace_profile& p) : p_{p} {}

  void apply(event const& e)
  {
    compact_event c;
    line_    = e.line;
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
        throw trace_error{p_.path, line_,
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

  void free(event const& e, compact_event& c)
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

  trace_profile& p_;
  std::uint64_t line_{};  ///< line of the event being profiled
  struct block {
    std::uint64_t size;
    std::uint32_t slot;
  };
  pointer_map<block> map_;  ///< traced pointer -> its size and slot
  std::vector<std::uint32_t> free_slots_;
  std::uint32_t next_slot_{};
  std::size_t live_{};
  std::size_t last_thread_{};
  std::size_t last_stream_{};
};

/// Parses the CSV on its own thread, a few chunks ahead of the profiler (bounded: `depth` chunks).
class parse_pipeline {
 public:
  explicit parse_pipeline(std::string const& path) : reader_{path}
  {
    thread_ = std::thread{[this] { produce(); }};
  }
  ~parse_pipeline()
  {
    {
      std::lock_guard lock{mutex_};
      stop_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  parse_pipeline(parse_pipeline const&)            = delete;
  parse_pipeline& operator=(parse_pipeline const&) = delete;

  /// The next parsed chunk (empty at the end); rethrows the parser's trace_error.
  std::vector<event> next(std::size_t& bytes_read, std::size_t& file_bytes)
  {
    std::unique_lock lock{mutex_};
    changed_.wait(lock, [&] { return !ready_.empty() || done_; });
    if (ready_.empty()) {
      if (error_) { std::rethrow_exception(error_); }
      return {};
    }
    auto chunk = std::move(ready_.front().events);
    bytes_read = ready_.front().bytes_read;
    file_bytes = reader_.file_bytes();
    ready_.pop_front();
    changed_.notify_all();
    return chunk;
  }

 private:
  static constexpr std::size_t depth        = 4;
  static constexpr std::size_t chunk_events = std::size_t{1} << 14;
  struct parsed {
    std::vector<event> events;
    std::size_t bytes_read;
  };

  void produce()
  {
    try {
      for (;;) {
        std::vector<event> chunk(chunk_events);
        chunk.resize(reader_.read(chunk));
        std::unique_lock lock{mutex_};
        if (chunk.empty() || stop_) { break; }
        changed_.wait(lock, [&] { return ready_.size() < depth || stop_; });
        ready_.push_back({std::move(chunk), reader_.bytes_read()});
        changed_.notify_all();
      }
    } catch (...) {
      std::lock_guard lock{mutex_};
      error_ = std::current_exception();
    }
    std::lock_guard lock{mutex_};
    done_ = true;
    changed_.notify_all();
  }

  trace_reader reader_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<parsed> ready_;
  bool done_{};
  bool stop_{};
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace

trace_profile profile_trace(std::string const& path, replay_progress const& progress)
{
  auto const t0 = std::chrono::steady_clock::now();
  trace_profile p;
  p.path    = path;
  p.compact = std::make_shared<compact_trace>();
  parse_pipeline parser{path};
  profiler prof{p};
  std::size_t done = 0, total = 0;
  for (auto chunk = parser.next(done, total); !chunk.empty(); chunk = parser.next(done, total)) {
    for (auto const& e : chunk) { prof.apply(e); }
    if (progress.report) { progress.report(done, total); }
  }
  prof.finish();
  p.parse_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return p;
}

}  // namespace gpumem::trace
