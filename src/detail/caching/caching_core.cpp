// The CUB-style caching allocator: bins, per-device caches, ready events. See caching_core.hpp.
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/detail/caching/caching_core.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>

#include <algorithm>
#include <iostream>
#include <utility>

namespace gpumem::detail::caching {
namespace {

/// Makes `device` current for its lifetime when enabled (and not already current).
class device_guard {
 public:
  device_guard(runtime& rt, int device, bool enabled) : rt_{rt}
  {
    if (!enabled) { return; }
    previous_ = rt.current_device();
    if (previous_ != device) {
      rt.set_device(device);
      switched_ = true;
    }
  }
  ~device_guard()
  {
    if (!switched_) { return; }
    try {
      rt_.set_device(previous_);
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw
    }
  }
  device_guard(device_guard const&)            = delete;
  device_guard& operator=(device_guard const&) = delete;

 private:
  runtime& rt_;
  int previous_{};
  bool switched_{};
};

std::thread::id thread_key(cudaStream_t stream)
{
  return cuda_stream_view{stream}.is_per_thread_default() ? std::this_thread::get_id()
                                                          : std::thread::id{};
}

}  // namespace

caching_core::caching_core(bin_layout layout, std::size_t max_cached_bytes, block_source& source,
                           runtime& rt, bool switch_devices)
    : layout_{layout},
      max_cached_bytes_{max_cached_bytes},
      source_{&source},
      runtime_{&rt},
      switch_devices_{switch_devices},
      debug_out_{&std::cout}
{
  auto const count = std::max(1, rt.device_count());
  for (int i = 0; i < count; ++i) {
    devices_.push_back(std::make_unique<device_state>());
    devices_.back()->bins.resize(layout_.bin_count());
  }
}

caching_core::~caching_core()
{
  for (auto& d : devices_) {
    for (auto& [ptr, b] : d->live) {
      if (b.event != nullptr) { runtime_->event_destroy(b.event); }
    }
  }
}

caching_core::device_state& caching_core::state(int device) const
{
  GPUMEM_EXPECTS(
      device >= 0 && device < static_cast<int>(devices_.size()), logic_error,
      format("caching allocator: invalid device ", device, " (", devices_.size(), " devices)"));
  return *devices_[static_cast<std::size_t>(device)];
}

std::optional<caching_core::block> caching_core::take_cached(device_state& d, unsigned bin,
                                                             cudaStream_t stream)
{
  auto& cached      = d.bins[bin - layout_.min_bin()];
  auto const thread = thread_key(stream);
  auto it           = std::find_if(cached.rbegin(), cached.rend(),
                                   [&](block const& b) { return b.stream == stream && b.thread == thread; });
  if (it == cached.rend()) {  // another stream's block: only once its work is complete
    it = std::find_if(cached.rbegin(), cached.rend(),
                      [&](block const& b) { return runtime_->event_query(b.event); });
  }
  if (it == cached.rend()) { return std::nullopt; }
  block b = *it;
  cached.erase(std::next(it).base());
  d.totals.free -= b.bytes;
  b.stream = stream;
  b.thread = thread;
  return b;
}

void* caching_core::allocate(int device, std::size_t bytes, cudaStream_t stream)
{
  auto& d = state(device);
  device_guard guard{*runtime_, device, switch_devices_};
  auto const choice = layout_.classify(bytes);
  if (choice.bin != invalid_bin) {
    std::lock_guard lock{d.mutex};
    if (auto b = take_cached(d, choice.bin, stream)) {
      try {
        d.live.emplace(b->ptr, *b);
      } catch (...) {
        release(device, *b);
        throw;
      }
      d.totals.live += b->bytes;
      debug_line(device, "reused cached block", *b, d);
      return b->ptr;
    }
  }
  return allocate_new(device, d, choice, stream);
}

void* caching_core::allocate_from_source(int device, std::size_t bytes, cudaStream_t stream)
{
  try {
    return source_->allocate(device, bytes, stream);
  } catch (out_of_memory const&) {
    release_cached(device);  // as CUB's allocator: free this device's cache and try once more
    return source_->allocate(device, bytes, stream);
  }
}

void* caching_core::allocate_new(int device, device_state& d, bin_choice choice,
                                 cudaStream_t stream)
{
  block b{nullptr, choice.bytes, choice.bin, stream, thread_key(stream), nullptr};
  if (choice.bin != invalid_bin) { b.event = runtime_->event_create(); }
  try {
    b.ptr = allocate_from_source(device, b.bytes, stream);
    std::lock_guard lock{d.mutex};
    d.live.emplace(b.ptr, b);
    d.totals.live += b.bytes;
    debug_line(device, "allocated new block", b, d);
  } catch (...) {
    if (b.ptr != nullptr) { source_->free(device, b.ptr, b.bytes, stream); }
    if (b.event != nullptr) { runtime_->event_destroy(b.event); }
    throw;
  }
  return b.ptr;
}

bool caching_core::try_cache(device_state& d, block& b)
{
  if (b.bin == invalid_bin || d.totals.free + b.bytes > max_cached_bytes_) { return false; }
  try {
    auto& cached = d.bins[b.bin - layout_.min_bin()];
    cached.reserve(cached.size() + 1);
    runtime_->event_record(b.event, b.stream);
    cached.push_back(b);
  } catch (...) {  // cannot cache safely: the caller frees the block instead
    return false;
  }
  d.totals.free += b.bytes;
  return true;
}

free_status caching_core::deallocate(int device, void* ptr,
                                     std::optional<cudaStream_t> reuse_stream,
                                     std::size_t* bytes_out)
{
  auto& d = state(device);
  device_guard guard{*runtime_, device, switch_devices_};
  std::unique_lock lock{d.mutex};
  auto it = d.live.find(ptr);
  if (it == d.live.end()) {
    if (debug_) {
      *debug_out_ << format("Device ", device, " DeviceFree of unknown pointer ", ptr_str(ptr),
                            ": ignored\n");
    }
    return free_status::unknown_pointer;
  }
  block b = it->second;
  d.live.erase(it);
  d.totals.live -= b.bytes;
  if (bytes_out != nullptr) { *bytes_out = b.bytes; }
  if (reuse_stream) {
    b.stream = *reuse_stream;
    b.thread = thread_key(*reuse_stream);
  }
  if (try_cache(d, b)) {
    debug_line(device, "returned block to the cache", b, d);
    return free_status::cached;
  }
  debug_line(device, "freed block", b, d);
  lock.unlock();
  release(device, b);
  return free_status::released;
}

void caching_core::release(int device, block const& b) noexcept
{
  source_->free(device, b.ptr, b.bytes, b.stream);
  if (b.event != nullptr) { runtime_->event_destroy(b.event); }
}

void caching_core::release_cached(int device)
{
  auto& d = state(device);
  std::vector<std::vector<block>> victims(layout_.bin_count());  // allocated before the lock
  std::size_t bytes{};
  {
    std::lock_guard lock{d.mutex};
    d.bins.swap(victims);  // noexcept: the cache is empty at once
    bytes = std::exchange(d.totals.free, 0);
  }
  std::size_t count{};
  for (auto const& bin : victims) { count += bin.size(); }
  if (debug_ && count > 0) {
    try {
      *debug_out_ << format("Device ", device, " freeing ", count, " cached blocks (", bytes,
                            " B)\n");
    } catch (...) {  // NOLINT(bugprone-empty-catch): debug output never changes the outcome
    }
  }
  device_guard guard{*runtime_, device, switch_devices_};
  for (auto const& bin : victims) {
    for (auto const& b : bin) { release(device, b); }
  }
}

void caching_core::set_max_cached_bytes(std::size_t bytes)
{
  auto const old = max_cached_bytes_.exchange(bytes);
  if (debug_) { *debug_out_ << format("Changing max_cached_bytes (", old, " -> ", bytes, ")\n"); }
}

void caching_core::free_all_cached()
{
  for (int device = 0; device < device_count(); ++device) { release_cached(device); }
}

released_blocks caching_core::release_live() noexcept
{
  released_blocks out;
  for (int device = 0; device < device_count(); ++device) {
    auto& d = *devices_[static_cast<std::size_t>(device)];
    std::unordered_map<void*, block> victims;
    {
      std::lock_guard lock{d.mutex};
      victims.swap(d.live);
      d.totals.live = 0;
    }
    try {
      device_guard guard{*runtime_, device, switch_devices_};
      for (auto const& [ptr, b] : victims) {
        release(device, b);
        ++out.count;
        out.bytes += b.bytes;
      }
    } catch (...) {  // NOLINT(bugprone-empty-catch): a device that cannot be made current keeps
    }                // its blocks (never throws from a destructor)
  }
  return out;
}

cached_totals caching_core::totals(int device) const
{
  auto& d = state(device);
  std::lock_guard lock{d.mutex};
  return d.totals;
}

std::vector<block_info> caching_core::blocks() const
{
  std::vector<block_info> out;
  for (int device = 0; device < device_count(); ++device) {
    auto& d = state(device);
    std::lock_guard lock{d.mutex};
    for (auto const& bin : d.bins) {
      for (auto const& b : bin) {
        out.push_back({b.ptr, b.bytes, b.bin, device, b.stream, b.event, false});
      }
    }
    for (auto const& [p, b] : d.live) {
      out.push_back({b.ptr, b.bytes, b.bin, device, b.stream, b.event, true});
    }
  }
  return out;
}

void caching_core::check_invariants() const
{
  for (int device = 0; device < device_count(); ++device) {
    auto& d = state(device);
    std::lock_guard lock{d.mutex};
    std::size_t free{};
    for (std::size_t i = 0; i < d.bins.size(); ++i) {
      auto const bin = layout_.min_bin() + static_cast<unsigned>(i);
      for (auto const& b : d.bins[i]) {
        GPUMEM_EXPECTS(
            b.bin == bin && b.bytes == layout_.bin_bytes(bin) && b.event != nullptr, logic_error,
            format("caching allocator: device ", device, ": cached block ", ptr_str(b.ptr), " (",
                   b.bytes, " B, bin ", b.bin, ") does not fit bin ", bin));
        free += b.bytes;
      }
    }
    std::size_t live{};
    for (auto const& [p, b] : d.live) { live += b.bytes; }
    GPUMEM_EXPECTS(free == d.totals.free && live == d.totals.live, logic_error,
                   format("caching allocator: device ", device, ": totals free ", d.totals.free,
                          " / live ", d.totals.live, " != blocks free ", free, " / live ", live));
  }
}

void caching_core::debug_line(int device, char const* what, block const& b,
                              device_state const& d) const noexcept
{
  if (!debug_) { return; }
  std::size_t cached{};
  for (auto const& bin : d.bins) { cached += bin.size(); }
  try {
    *debug_out_ << format("Device ", device, " ", what, " at ", ptr_str(b.ptr), " (", b.bytes,
                          " B) on stream ", static_cast<void*>(b.stream), "; ", cached,
                          " cached blocks (", d.totals.free, " B), ", d.live.size(),
                          " live blocks (", d.totals.live, " B)\n");
  } catch (...) {  // NOLINT(bugprone-empty-catch): debug output never changes the outcome
  }
}

}  // namespace gpumem::detail::caching
