// replay(): drives a resource stack with a trace and measures it (see replay.hpp).
#include "replayer.hpp"
#include "trace_pipeline.hpp"

#include <algorithm>
#include <chrono>

namespace gpumem::trace {
namespace {

/// The events of a profiled trace, read back from its compact file.
class compact_source final : public event_source {
 public:
  compact_source(trace_profile const& profile, std::size_t chunk_events)
      : profile_{profile}, buffer_(std::max<std::size_t>(chunk_events, 1))
  {
    profile.compact->rewind();
  }
  bool next(std::span<compact_event const>& out) override
  {
    auto const n = profile_.compact->read(buffer_);
    done_ += n;
    out = {buffer_.data(), n};
    return n != 0;
  }
  [[nodiscard]] std::span<std::uint64_t const> stream_ids() const override
  {
    return profile_.streams;
  }
  void report(replay_progress const& progress) const override
  {
    if (progress.report) { progress.report(done_, profile_.events); }
  }

 private:
  trace_profile const& profile_;
  std::vector<compact_event> buffer_;
  std::size_t done_{};
};

/// The events as the profiling pipeline hands them over.
class pipeline_source final : public event_source {
 public:
  explicit pipeline_source(trace_pipeline& pipe) : pipe_{pipe} {}
  bool next(std::span<compact_event const>& out) override
  {
    if (!pipe_.next(chunk_)) { return false; }
    streams_.insert(streams_.end(), chunk_.new_streams.begin(), chunk_.new_streams.end());
    out = chunk_.events;
    return true;
  }
  [[nodiscard]] std::span<std::uint64_t const> stream_ids() const override { return streams_; }
  void report(replay_progress const& progress) const override
  {
    if (progress.report) { progress.report(chunk_.bytes_read, chunk_.file_bytes); }
  }
  /// Reads the rest of the trace (after a replay stopped early), reporting progress.
  void drain(replay_progress const& progress)
  {
    for (std::span<compact_event const> rest; next(rest);) { report(progress); }
  }

 private:
  trace_pipeline& pipe_;
  profiled_chunk chunk_;
  std::vector<std::uint64_t> streams_;
};

}  // namespace

double memory_state::internal_fragmentation() const
{
  auto const given = live_bytes + internal_bytes;
  return given == 0 ? 0.0 : static_cast<double>(internal_bytes) / static_cast<double>(given);
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

replayer::replayer(std::string const& trace, mr::device_memory_resource& top,
                   std::string const& name, spec::footprint_source const* footprint,
                   metered_runtime& meter, replay_options const& options)
    : top_{&top},
      meter_{&meter},
      footprint_{footprint},
      options_{options},
      timeline_{options.timeline_points}
{
  result_.trace    = trace;
  result_.resource = name;
  recorder_.grant(options_.granted_bytes);
}

replayer::~replayer()
{
  meter_->observe(nullptr);
  release_all();
}

void replayer::map_streams(std::span<std::uint64_t const> ids)
{
  for (auto i = streams_.size(); i < ids.size(); ++i) {
    streams_.push_back(options_.stream_of ? options_.stream_of(ids[i]) : nullptr);
  }
}

void replayer::deallocate(live_block const& b, cudaStream_t s) noexcept
{
  top_->deallocate(b.ptr, b.size, s);
  if (recorder_.logging() && b.ptr != nullptr) {
    recorder_.block_removed({reinterpret_cast<std::uintptr_t>(b.ptr), b.size});
  }
}

void replayer::allocate(compact_event const& e, cudaStream_t s)
{
  if (e.slot >= slots_.size()) {
    auto const n = std::max<std::size_t>(e.slot + 1, 2 * slots_.size());
    slots_.resize(n);
    occupied_.resize(n, 0);
  }
  auto& b = slots_[e.slot];
  if (occupied_[e.slot] != 0) {  // a double allocate in the trace: the stale block goes first
    deallocate(b, b.stream);
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
  record_address(b.ptr);
  if (recorder_.logging() && b.ptr != nullptr) {
    recorder_.block_added({reinterpret_cast<std::uintptr_t>(b.ptr), b.size});
  }
}

void replayer::record_address(void const* p)
{
  if (footprint_ != nullptr || addresses_omitted_) { return; }
  if (addresses_.size() == max_recorded_allocations) {
    addresses_omitted_ = true;
    addresses_         = {};
    return;
  }
  addresses_.push_back(reinterpret_cast<std::uintptr_t>(p));
}

void replayer::free(compact_event const& e, cudaStream_t s)
{
  auto const& b = slots_[e.slot];
  if (time_calls_) {
    auto const t0 = std::chrono::steady_clock::now();
    deallocate(b, s);
    call_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } else {
    deallocate(b, s);
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
  std::size_t const held = held_;
  if (held > result_.peak_held_bytes) {
    result_.peak_held_bytes = held;
    result_.peak_held_event = event_;
  }
  if (live_ > peak_live_ || event_ == 0) {
    peak_live_ = live_;
    note_peak();
  }
  timeline_.add({live_, held});
  ++event_;
}

void replayer::note_peak()
{
  if (footprint_ != nullptr) {
    result_.at_peak = unlaid_state(held_);
    return;
  }
  recorder_.join_adjacent_chunks(meter_->maps_memory());  // before a layout may be settled
  recorder_.new_peak({held_, live_, live_blocks_}, slots_.size() + meter_->chunk_count(),
                     [&](std::vector<address_range>& blocks, std::vector<address_range>& chunks) {
                       live_ranges(blocks);
                       chunks = meter_->chunks();
                     });
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

void replayer::start()
{
  held_                 = held_now();
  result_.held_at_start = held_;
  meter_->reset_peak();
  if (meter_->counts_driver_calls()) { calls_at_start_ = meter_->driver_calls(); }
  if (footprint_ == nullptr) {
    history_.start(meter_->chunks());
    meter_->observe(&history_);
  }
}

replay_layout replayer::take_layout()
{
  replay_layout l;
  l.known = footprint_ == nullptr;
  if (!l.known) { return l; }
  l.omitted = addresses_omitted_ || history_.omitted();
  if (l.omitted) { return l; }
  l.chunks      = history_.take();
  l.chunks_join = meter_->maps_memory();
  l.addresses   = std::move(addresses_);
  auto base     = UINTPTR_MAX;
  for (auto const& c : l.chunks) { base = std::min(base, c.address); }
  for (auto a : l.addresses) {
    if (a != 0) { base = std::min(base, a); }
  }
  l.base = base == UINTPTR_MAX ? 0 : base;
  return l;
}

replay_result replayer::finish()
{
  if (calls_at_start_) { result_.driver_calls = meter_->driver_calls() - *calls_at_start_; }
  timeline_.finish();  // the last, partial span
  result_.timeline.reserve(timeline_.samples().size());
  for (auto const& [event, live, held] : timeline_.samples()) {
    result_.timeline.push_back({event, live, held});
  }
  if (footprint_ == nullptr) {
    recorder_.join_adjacent_chunks(meter_->maps_memory());
    result_.at_peak = recorder_.at_peak();
  }
  meter_->observe(nullptr);
  result_.layout = take_layout();
  release_all();
  if (time_calls_) { result_.seconds = call_seconds_; }
  result_.peak_held_bytes = std::max(result_.peak_held_bytes, meter_->peak_held_bytes());
  return std::move(result_);
}

replay_result replayer::run(event_source& source)
{
  start();
  for (std::span<compact_event const> chunk; source.next(chunk);) {
    map_streams(source.stream_ids());
    auto const t0 = std::chrono::steady_clock::now();
    try {
      for (auto const& e : chunk) { apply(e); }
    } catch (stop_replay const&) {
    }
    result_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    source.report(options_.progress);
    if (result_.failure) { break; }
  }
  return finish();
}

namespace {

/// `options`, with the stack's granted sizes unless the caller gave some.
replay_options with_grants(replay_options options, spec::resource_stack const& stack)
{
  if (!options.granted_bytes) {
    options.granted_bytes = stack.grant_function();  // the layers are looked at once
  }
  return options;
}

}  // namespace

replay_result replay(trace_profile const& profile, spec::resource_stack& stack,
                     metered_runtime& meter, replay_options const& options)
{
  return replay(profile, stack.top(), stack.spec(), stack.footprint(), meter,
                with_grants(options, stack));
}

replay_result replay(trace_profile const& profile, mr::device_memory_resource& top,
                     std::string const& name, spec::footprint_source const* footprint,
                     metered_runtime& meter, replay_options const& options)
{
  replayer r{profile.path, top, name, footprint, meter, options};
  if (options.threads && profile.threads.size() > 1) { return r.run_threads(profile); }
  compact_source source{profile, options.chunk_events};
  return r.run(source);
}

profiled_replay profile_and_replay(std::string const& path, spec::resource_stack& stack,
                                   metered_runtime& meter, replay_options const& options)
{
  return profile_and_replay(path, stack.top(), stack.spec(), stack.footprint(), meter,
                            with_grants(options, stack));
}

profiled_replay profile_and_replay(std::string const& path, mr::device_memory_resource& top,
                                   std::string const& name, spec::footprint_source const* footprint,
                                   metered_runtime& meter, replay_options const& options)
{
  if (options.threads) {  // the threads are known only once the whole trace has been read
    auto profile = profile_trace(path, options.progress);
    auto result  = replay(profile, top, name, footprint, meter, options);
    return {std::move(profile), std::move(result)};
  }
  trace_pipeline pipe{path, true};
  pipeline_source source{pipe};
  replayer r{path, top, name, footprint, meter, options};
  auto result = r.run(source);
  source.drain(options.progress);
  return {pipe.take_profile(), std::move(result)};
}

}  // namespace gpumem::trace
