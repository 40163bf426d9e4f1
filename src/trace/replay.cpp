// replay(): drives a resource stack with a trace and measures it (see replay.hpp).
#include "replayer.hpp"

#include <gpumem/trace/trace_reader.hpp>

#include <algorithm>
#include <chrono>

namespace gpumem::trace {

double memory_state::internal_fragmentation() const
{
  return held_bytes == 0 ? 0.0
                         : static_cast<double>(internal_bytes) / static_cast<double>(held_bytes);
}

double memory_state::external_fragmentation() const
{
  return free_bytes == 0
             ? 0.0
             : 1.0 - static_cast<double>(largest_free_bytes) / static_cast<double>(free_bytes);
}

double replay_result::ns_per_operation() const
{
  return operations == 0 ? 0.0 : seconds * 1e9 / static_cast<double>(operations);
}

double replay_result::footprint_ratio(trace_profile const& p) const
{
  return p.peak_live_bytes == 0
             ? 0.0
             : static_cast<double>(peak_held_bytes) / static_cast<double>(p.peak_live_bytes);
}

replayer::replayer(trace_profile const& profile, spec::resource_stack& stack,
                   metered_runtime& meter, replay_options const& options)
    : profile_{profile},
      top_{&stack.top()},
      meter_{&meter},
      footprint_{stack.footprint()},
      options_{options}
{
  auto const points = std::max<std::size_t>(options.timeline_points, 1);
  bucket_events_    = std::max<std::uint64_t>(1, (profile.events + points - 1) / points);
  result_.trace     = profile.path;
  result_.resource  = stack.spec();
  result_.timeline.reserve(points + 1);
}

cudaStream_t replayer::stream_of(std::uint64_t id)
{
  if (!options_.stream_of) { return nullptr; }
  for (auto const& [k, s] : streams_) {
    if (k == id) { return s; }
  }
  streams_.emplace_back(id, options_.stream_of(id));
  return streams_.back().second;
}

void replayer::allocate(event const& e, cudaStream_t s)
{
  live_block stale;
  if (map_.erase(e.pointer, stale)) {
    top_->deallocate(stale.ptr, stale.size, stale.stream);
    live_ -= stale.size;
    ++result_.operations;
  }
  void* p = nullptr;
  try {
    p = top_->allocate(e.size, s);
  } catch (std::bad_alloc const& ex) {
    fail(e, ex.what());
    throw stop_replay{};
  }
  map_.insert(e.pointer, {p, e.size, s});
  live_ += e.size;
  ++result_.operations;
}

void replayer::free(event const& e, cudaStream_t s)
{
  live_block b;
  if (!map_.erase(e.pointer, b)) { return; }
  top_->deallocate(b.ptr, b.size, s);
  live_ -= b.size;
  ++result_.operations;
}

void replayer::apply(event const& e)
{
  if (e.act == action::allocate) {
    allocate(e, stream_of(e.stream));
  } else if (e.act == action::free) {
    free(e, stream_of(e.stream));
  }
  sample();
}

void replayer::sample()
{
  std::size_t const held  = held_now();
  bucket_live_            = std::max(bucket_live_, live_);
  bucket_held_            = std::max(bucket_held_, held);
  result_.peak_held_bytes = std::max(result_.peak_held_bytes, held);
  if (event_ == profile_.peak_live_event) { result_.at_peak = state(); }
  ++event_;
  if (event_ % bucket_events_ == 0 || event_ == profile_.events) {
    result_.timeline.push_back({event_ - 1, bucket_live_, bucket_held_});
    bucket_live_ = bucket_held_ = 0;
  }
}

void replayer::fail(event const& e, char const* message)
{
  result_.failure = replay_failure{event_, e.line, e.size, message, state()};
}

void replayer::release_all() noexcept
{
  map_.for_each(
      [&](std::uint64_t, live_block const& b) { top_->deallocate(b.ptr, b.size, b.stream); });
  map_.clear();
  live_ = 0;
}

void replayer::run_serial()
{
  trace_reader reader{profile_.path};
  std::vector<event> chunk(options_.chunk_events);
  for (auto n = reader.read(chunk); n != 0; n = reader.read(chunk)) {
    auto const t0 = std::chrono::steady_clock::now();
    try {
      for (std::size_t i = 0; i < n; ++i) { apply(chunk[i]); }
    } catch (stop_replay const&) {
      n = 0;
    }
    result_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (options_.progress.report) {
      options_.progress.report(reader.bytes_read(), reader.file_bytes());
    }
    if (result_.failure) { break; }
  }
}

replay_result replayer::run()
{
  if (options_.threads && profile_.threads.size() > 1) {
    run_threads();
  } else {
    run_serial();
  }
  release_all();
  result_.peak_held_bytes = std::max(result_.peak_held_bytes, meter_->peak_held_bytes());
  return std::move(result_);
}

replay_result replay(trace_profile const& profile, spec::resource_stack& stack,
                     metered_runtime& meter, replay_options const& options)
{
  replayer r{profile, stack, meter, options};
  return r.run();
}

}  // namespace gpumem::trace
