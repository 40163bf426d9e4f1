// replay(): drives a resource stack with a trace and measures it (see replay.hpp).
#include "replayer.hpp"

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

replayer::replayer(trace_profile const& profile, mr::device_memory_resource& top,
                   std::string const& name, spec::footprint_source const* footprint,
                   metered_runtime& meter, replay_options const& options)
    : profile_{profile},
      top_{&top},
      meter_{&meter},
      footprint_{footprint},
      options_{options},
      slots_(profile.slots),
      occupied_(profile.slots, 0)
{
  auto const points = std::max<std::size_t>(options.timeline_points, 1);
  bucket_events_    = std::max<std::uint64_t>(1, (profile.events + points - 1) / points);
  result_.trace     = profile.path;
  result_.resource  = name;
  countdown_        = bucket_events_;
  result_.timeline.reserve(points + 1);
  meter.reset_peak();
  for (auto id : profile.streams) {
    streams_.push_back(options.stream_of ? options.stream_of(id) : nullptr);
  }
}

void replayer::allocate(compact_event const& e, cudaStream_t s)
{
  auto& b = slots_[e.slot];
  if (occupied_[e.slot] != 0) {  // a double allocate in the trace: the stale block goes first
    top_->deallocate(b.ptr, b.size, b.stream);
    live_ -= b.size;
    --live_blocks_;
    occupied_[e.slot] = 0;
    ++result_.operations;
  }
  try {
    b = {timed_allocate(e.size, s), e.size, s};
  } catch (std::bad_alloc const& ex) {
    fail(e, ex.what());
    throw stop_replay{};
  }
  occupied_[e.slot] = 1;
  live_ += e.size;
  ++live_blocks_;
  ++result_.operations;
}

void replayer::free(compact_event const& e, cudaStream_t s)
{
  auto const& b = slots_[e.slot];
  if (time_calls_) {
    auto const t0 = std::chrono::steady_clock::now();
    top_->deallocate(b.ptr, b.size, s);
    call_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } else {
    top_->deallocate(b.ptr, b.size, s);
  }
  occupied_[e.slot] = 0;
  live_ -= b.size;
  --live_blocks_;
  ++result_.operations;
}

void* replayer::timed_allocate(std::size_t bytes, cudaStream_t s)
{
  if (!time_calls_) { return top_->allocate(bytes, s); }
  auto const t0 = std::chrono::steady_clock::now();
  void* p       = top_->allocate(bytes, s);
  call_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return p;
}

void replayer::apply(compact_event const& e)
{
  if (e.act == compact_event::allocate) {
    allocate(e, streams_[e.stream]);
  } else if (e.act == compact_event::free) {
    free(e, streams_[e.stream]);
  }
  sample(e.act == compact_event::allocate);
}

void replayer::sample(bool grew)
{
  // A footprint_source may be slow to ask (a CUDA call): ask it only when held may have grown.
  if (footprint_ == nullptr || grew) { held_ = held_now(); }
  std::size_t const held  = held_;
  bucket_live_            = std::max(bucket_live_, live_);
  bucket_held_            = std::max(bucket_held_, held);
  result_.peak_held_bytes = std::max(result_.peak_held_bytes, held);
  if (event_ == profile_.peak_live_event) { result_.at_peak = state(); }
  ++event_;
  if (--countdown_ == 0 || event_ == profile_.events) {
    result_.timeline.push_back({event_ - 1, bucket_live_, bucket_held_});
    bucket_live_ = bucket_held_ = 0;
    countdown_                  = bucket_events_;
  }
}

void replayer::fail(compact_event const& e, char const* message)
{
  result_.failure = replay_failure{event_, e.line, e.size, message, state()};
}

void replayer::release_all() noexcept
{
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (occupied_[i] != 0) { top_->deallocate(slots_[i].ptr, slots_[i].size, slots_[i].stream); }
    occupied_[i] = 0;
  }
  live_ = live_blocks_ = 0;
}

void replayer::run_serial()
{
  auto& trace = *profile_.compact;
  trace.rewind();
  std::vector<compact_event> chunk(options_.chunk_events);
  std::uint64_t done = 0;
  for (auto n = trace.read(chunk); n != 0; n = trace.read(chunk)) {
    auto const t0 = std::chrono::steady_clock::now();
    try {
      for (std::size_t i = 0; i < n; ++i) { apply(chunk[i]); }
    } catch (stop_replay const&) {
    }
    result_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    done += n;
    if (options_.progress.report) { options_.progress.report(done, profile_.events); }
    if (result_.failure) { break; }
  }
}

replay_result replayer::run()
{
  held_ = held_now();
  if (options_.threads && profile_.threads.size() > 1) {
    run_threads();
  } else {
    run_serial();
  }
  release_all();
  if (time_calls_) { result_.seconds = call_seconds_; }
  result_.peak_held_bytes = std::max(result_.peak_held_bytes, meter_->peak_held_bytes());
  return std::move(result_);
}

replay_result replay(trace_profile const& profile, spec::resource_stack& stack,
                     metered_runtime& meter, replay_options const& options)
{
  return replay(profile, stack.top(), stack.spec(), stack.footprint(), meter, options);
}

replay_result replay(trace_profile const& profile, mr::device_memory_resource& top,
                     std::string const& name, spec::footprint_source const* footprint,
                     metered_runtime& meter, replay_options const& options)
{
  replayer r{profile, top, name, footprint, meter, options};
  return r.run();
}

}  // namespace gpumem::trace
