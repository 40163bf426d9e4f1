// trace_pipeline: the producer thread and the bounded hand-over (see trace_pipeline.hpp), and
// profile_trace(), the pass without a replay.
#include "trace_pipeline.hpp"

#include "profiler.hpp"

#include <gpumem/trace/trace_reader.hpp>

#include <chrono>

namespace gpumem::trace {

trace_pipeline::trace_pipeline(std::string const& path, bool forward_events)
    : path_{path}, forward_{forward_events}
{
  profile_.path    = path;
  profile_.compact = std::make_shared<compact_trace>();
  thread_          = std::thread{[this] { produce(); }};
}

trace_pipeline::~trace_pipeline()
{
  {
    std::lock_guard lock{mutex_};
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

bool trace_pipeline::next(profiled_chunk& out)
{
  std::unique_lock lock{mutex_};
  changed_.wait(lock, [&] { return !ready_.empty() || done_; });
  if (ready_.empty()) {
    if (error_) { std::rethrow_exception(error_); }
    return false;
  }
  if (out.events.capacity() != 0) { spare_.push_back(std::move(out.events)); }
  out = std::move(ready_.front());
  ready_.pop_front();
  changed_.notify_all();
  return true;
}

bool trace_pipeline::hand_over(profiled_chunk&& c)
{
  std::unique_lock lock{mutex_};
  if (ready_.size() >= depth) {  // the consumer is behind: waiting is not reading time
    auto const t0 = std::chrono::steady_clock::now();
    changed_.wait(lock, [&] { return ready_.size() < depth || stop_; });
    waited_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (stop_) { return false; }
  ready_.push_back(std::move(c));
  changed_.notify_all();
  return true;
}

void trace_pipeline::produce_chunks()
{
  auto const t0 = std::chrono::steady_clock::now();
  trace_reader reader{path_};
  profiler prof{profile_};
  std::vector<compact_event> own(chunk_events);  // the events, when they are not forwarded
  event e;
  for (bool more = true; more;) {
    profiled_chunk c;
    if (forward_) {
      std::lock_guard lock{mutex_};
      if (!spare_.empty()) {
        c.events = std::move(spare_.back());
        spare_.pop_back();
      }
    }
    auto& events = forward_ ? c.events : own;
    events.resize(chunk_events);
    auto const streams_before = profile_.streams.size();
    std::size_t n             = 0;
    while (n < chunk_events && (more = reader.next(e))) { events[n++] = prof.apply(e); }
    events.resize(n);
    profile_.compact->append(events);
    c.new_streams.assign(profile_.streams.begin() + static_cast<std::ptrdiff_t>(streams_before),
                         profile_.streams.end());
    c.bytes_read = reader.bytes_read();
    c.file_bytes = reader.file_bytes();
    if (!hand_over(std::move(c))) { return; }
  }
  prof.finish();
  profile_.truncated_line = reader.truncated_line();
  profile_.compact->finish();
  profile_.parse_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() -
      waited_seconds_;
}

void trace_pipeline::produce()
{
  try {
    produce_chunks();
  } catch (...) {
    std::lock_guard lock{mutex_};
    error_ = std::current_exception();
  }
  std::lock_guard lock{mutex_};
  done_ = true;
  changed_.notify_all();
}

trace_profile profile_trace(std::string const& path, replay_progress const& progress)
{
  trace_pipeline pipe{path, false};
  profiled_chunk c;
  while (pipe.next(c)) {
    if (progress.report) { progress.report(c.bytes_read, c.file_bytes); }
  }
  return pipe.take_profile();
}

}  // namespace gpumem::trace
