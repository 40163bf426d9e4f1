// The host stand-in for the CUDA runtime. See detail/host_runtime.hpp for the model.
#include "host_vmm_model.hpp"

#include <gpumem/align.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/detail/stream_capture.hpp>
#include <gpumem/error.hpp>

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace gpumem::detail {
namespace {

struct stream_rec;

/// Work enqueued on the waiting stream after position `at` waits for `dep` to reach `dep_at`.
struct wait_rec {
  std::uint64_t at;
  stream_rec* dep;
  std::uint64_t dep_at;
};

struct stream_rec {
  std::uint64_t enqueued{};
  std::uint64_t completed{};
  std::vector<wait_rec> waits;  // unsatisfied waits only
};

struct event_rec {
  stream_rec* stream{};  // null until recorded
  std::uint64_t position{};
};

/// A simulated address space: best fit over free ranges, coalescing on free. O(log n).
class address_space {
 public:
  explicit address_space(std::size_t capacity) { insert_free(base, capacity); }

  /// Returns 0 when no range fits.
  std::uintptr_t take(std::size_t bytes)
  {
    auto it = by_size_.lower_bound({bytes, 0});
    if (it == by_size_.end()) { return 0; }
    auto const [size, addr] = *it;
    erase_free(addr, size);
    if (size > bytes) { insert_free(addr + bytes, size - bytes); }
    return addr;
  }

  void give(std::uintptr_t addr, std::size_t bytes)
  {
    auto next = by_addr_.lower_bound(addr);
    if (next != by_addr_.end() && addr + bytes == next->first) {
      bytes += next->second;
      erase_free(next->first, next->second);
    }
    auto prev = by_addr_.lower_bound(addr);
    if (prev != by_addr_.begin()) {
      --prev;
      if (prev->first + prev->second == addr) {
        addr = prev->first;
        bytes += prev->second;
        erase_free(prev->first, prev->second);
      }
    }
    insert_free(addr, bytes);
  }

 private:
  static constexpr std::uintptr_t base{std::uintptr_t{1} << 44};  // 16 TiB: never a host address

  void insert_free(std::uintptr_t addr, std::size_t bytes)
  {
    by_addr_.emplace(addr, bytes);
    by_size_.emplace(bytes, addr);
  }
  void erase_free(std::uintptr_t addr, std::size_t bytes)
  {
    by_addr_.erase(addr);
    by_size_.erase({bytes, addr});
  }

  std::map<std::uintptr_t, std::size_t> by_addr_;
  std::set<std::pair<std::size_t, std::uintptr_t>> by_size_;
};

thread_local int tls_current_device = 0;

}  // namespace

struct host_runtime::state {
  explicit state(host_runtime_options const& o)
      : options{o}, space{o.capacity_bytes}, vmm{o.backed, o.vmm_granularity_bytes}
  {
  }

  host_runtime_options options;
  mutable std::mutex mutex;
  address_space space;
  std::unordered_map<void*, std::size_t> live;  // pointer -> footprint
  std::size_t used{};
  std::size_t peak{};
  std::size_t failures_to_inject{};
  std::size_t map_failures_to_inject{};
  host_vmm_model vmm;
  host_runtime_calls calls;
  std::vector<host_runtime_advice> advice;  ///< the first advise_preferred_location calls
  stream_rec legacy;
  std::map<std::thread::id, std::unique_ptr<stream_rec>> per_thread;
  std::set<stream_rec*> created_set;
  std::vector<std::unique_ptr<stream_rec>> created;
  std::set<event_rec*> events;
  /// Streams that may have work not completed (every other stream has completed == enqueued), so
  /// a device-wide synchronization costs nothing per idle stream: with auto_complete, or tens of
  /// thousands of streams, the stand-in adds no per-stream cost to a cudaFree.
  std::unordered_set<stream_rec*> pending;
  /// The stream under a global-mode capture (null: none) and whether a forbidden call broke it.
  stream_rec* capturing{};
  bool capture_invalidated{};

  /// Throws what CUDA throws for `call` during a global capture (and invalidates the capture).
  void forbid_during_capture(char const* call)
  {
    if (capturing == nullptr) [[likely]] { return; }
    capture_invalidated = true;
    throw_stream_capture_error(cudaErrorStreamCaptureUnsupported, call);
  }
  /// The legacy default stream synchronizes with every stream: CUDA refuses it during a capture.
  void forbid_legacy_during_capture(stream_rec const& s, char const* call)
  {
    if (capturing == nullptr || &s != &legacy || capturing == &legacy) [[likely]] { return; }
    capture_invalidated = true;
    throw_stream_capture_error(cudaErrorStreamCaptureImplicit, call);
  }

  stream_rec& resolve(cudaStream_t handle)
  {
    if (handle == nullptr || handle == cudaStreamLegacy) { return legacy; }
    if (handle == cudaStreamPerThread) {
      auto& rec = per_thread[std::this_thread::get_id()];
      if (!rec) { rec = std::make_unique<stream_rec>(); }
      return *rec;
    }
    auto* rec = reinterpret_cast<stream_rec*>(handle);
    GPUMEM_EXPECTS(created_set.contains(rec), logic_error,
                   format("host_runtime: unknown stream ", static_cast<void*>(handle)));
    return *rec;
  }

  event_rec& resolve(cudaEvent_t handle)
  {
    auto* rec = reinterpret_cast<event_rec*>(handle);
    GPUMEM_EXPECTS(events.contains(rec), logic_error,
                   format("host_runtime: unknown event ", static_cast<void*>(handle)));
    return *rec;
  }

  static bool satisfied(wait_rec const& w) { return w.dep->completed >= w.dep_at; }

  /// Completes `s` as far as its unsatisfied waits allow, without forcing other streams.
  static void advance(stream_rec& s)
  {
    std::erase_if(s.waits, satisfied);
    std::uint64_t target = s.enqueued;
    for (auto const& w : s.waits) { target = std::min(target, w.at); }
    s.completed = std::max(s.completed, target);
  }

  /// Host blocks until `s` reaches `position`: its dependencies are forced to complete first.
  static void sync_to(stream_rec& s, std::uint64_t position)
  {
    for (auto const& w : s.waits) {
      if (w.at < position && !satisfied(w)) { sync_to(*w.dep, w.dep_at); }
    }
    std::erase_if(s.waits, satisfied);
    s.completed = std::max(s.completed, std::min(position, s.enqueued));
  }

  /// Work was added to `s`.
  void submitted(stream_rec& s)
  {
    if (options.auto_complete) {
      s.completed = s.enqueued;
    } else {
      pending.insert(&s);
    }
  }

  /// The host blocks until the device is idle: every stream completes its work.
  void synchronize_all()
  {
    std::vector<stream_rec*> const todo(pending.begin(), pending.end());
    for (auto* s : todo) {
      ++calls.synchronize_visits;
      sync_to(*s, s->enqueued);  // afterwards s->completed == s->enqueued
    }
    pending.clear();
  }

  std::vector<stream_rec*> all_streams()
  {
    std::vector<stream_rec*> all{&legacy};
    for (auto& [id, rec] : per_thread) { all.push_back(rec.get()); }
    for (auto& rec : created) { all.push_back(rec.get()); }
    return all;
  }

  /// Charges `bytes` of capacity, or throws out_of_memory (also when a failure is injected).
  void charge(std::size_t bytes, char const* what)
  {
    bool const injected = failures_to_inject > 0;
    if (injected) { --failures_to_inject; }
    if (injected || bytes > options.capacity_bytes - used) {
      GPUMEM_FAIL(out_of_memory, format("host_runtime: cannot allocate ", bytes_str(bytes), " of ",
                                        what, ": ", bytes_str(options.capacity_bytes - used),
                                        " free of ", bytes_str(options.capacity_bytes)));
    }
    used += bytes;
    peak = std::max(peak, used);
  }

  void* take_memory(std::size_t footprint)
  {
    if (!options.backed) { return reinterpret_cast<void*>(space.take(footprint)); }
    return std::aligned_alloc(CUDA_ALLOCATION_ALIGNMENT, footprint);
  }
};

host_runtime::host_runtime(host_runtime_options options) : state_{std::make_unique<state>(options)}
{
  GPUMEM_EXPECTS(options.granularity_bytes > 0 && is_pow2(options.granularity_bytes), logic_error,
                 format("host_runtime: granularity_bytes must be a power of two, got ",
                        options.granularity_bytes));
}

host_runtime::~host_runtime()
{
  for (auto& [ptr, size] : state_->live) {
    if (state_->options.backed) { std::free(ptr); }
  }
  for (auto* e : state_->events) { delete e; }
}

cudaStream_t host_runtime::create_stream()
{
  std::lock_guard lock{state_->mutex};
  auto& rec = state_->created.emplace_back(std::make_unique<stream_rec>());
  state_->created_set.insert(rec.get());
  return reinterpret_cast<cudaStream_t>(rec.get());
}

void host_runtime::enqueue(cudaStream_t stream, std::uint64_t count)
{
  std::lock_guard lock{state_->mutex};
  auto& s = state_->resolve(stream);
  s.enqueued += count;
  state_->submitted(s);
}

void host_runtime::complete(cudaStream_t stream)
{
  std::lock_guard lock{state_->mutex};
  state::advance(state_->resolve(stream));
}

void host_runtime::complete_all()
{
  std::lock_guard lock{state_->mutex};
  state_->synchronize_all();
}

std::uint64_t host_runtime::enqueued(cudaStream_t stream)
{
  std::lock_guard lock{state_->mutex};
  return state_->resolve(stream).enqueued;
}

std::uint64_t host_runtime::completed(cudaStream_t stream)
{
  std::lock_guard lock{state_->mutex};
  return state_->resolve(stream).completed;
}

void host_runtime::fail_next_allocations(std::size_t count)
{
  std::lock_guard lock{state_->mutex};
  state_->failures_to_inject = count;
}

std::size_t host_runtime::used_bytes() const
{
  std::lock_guard lock{state_->mutex};
  return state_->used;
}

std::size_t host_runtime::peak_used_bytes() const
{
  std::lock_guard lock{state_->mutex};
  return state_->peak;
}

std::size_t host_runtime::live_allocations() const
{
  std::lock_guard lock{state_->mutex};
  return state_->live.size();
}

host_runtime_calls host_runtime::calls() const
{
  std::lock_guard lock{state_->mutex};
  return state_->calls;
}

host_runtime_options const& host_runtime::options() const noexcept
{
  return state_->options;
}

void host_runtime::check_invariants() const
{
  std::lock_guard lock{state_->mutex};
  state_->vmm.check_invariants();
  std::size_t sum{state_->vmm.physical_bytes()};
  for (auto const& [ptr, size] : state_->live) { sum += size; }
  GPUMEM_EXPECTS(sum == state_->used, logic_error,
                 format("host_runtime: used_bytes ", state_->used,
                        " != sum of live allocations and physical handles ", sum));
  GPUMEM_EXPECTS(state_->used <= state_->options.capacity_bytes, logic_error,
                 "host_runtime: used_bytes exceeds capacity");
  for (auto* s : const_cast<state&>(*state_).all_streams()) {
    GPUMEM_EXPECTS(s->completed <= s->enqueued, logic_error,
                   "host_runtime: a stream completed more than was enqueued");
  }
}

void* host_runtime::allocate(memory_kind kind, std::size_t bytes)
{
  std::lock_guard lock{state_->mutex};
  auto& st = *state_;
  ++st.calls.allocate;
  st.forbid_during_capture("cudaMalloc");
  auto const granule = std::max(st.options.granularity_bytes, CUDA_ALLOCATION_ALIGNMENT);
  bool const fits = bytes <= st.options.capacity_bytes - st.used && can_align_up(bytes, granule) &&
                    align_up(bytes, granule) <= st.options.capacity_bytes - st.used;
  auto const footprint = fits ? align_up(bytes, granule) : 0;
  void* ptr            = nullptr;
  if (fits && st.failures_to_inject == 0) { ptr = st.take_memory(footprint); }
  if (st.failures_to_inject > 0) { --st.failures_to_inject; }
  if (ptr == nullptr) {
    GPUMEM_FAIL(out_of_memory,
                format("host_runtime: cannot allocate ", bytes_str(bytes), " of ", to_string(kind),
                       " memory: ", bytes_str(st.options.capacity_bytes - st.used), " free of ",
                       bytes_str(st.options.capacity_bytes)));
  }
  st.live.emplace(ptr, footprint);
  st.used += footprint;
  st.peak = std::max(st.peak, st.used);
  return ptr;
}

void host_runtime::free(memory_kind, void* ptr) noexcept
{
  if (ptr == nullptr) { return; }
  std::lock_guard lock{state_->mutex};
  auto& st = *state_;
  ++st.calls.free;
  auto it = st.live.find(ptr);
  if (it == st.live.end()) { return; }  // foreign pointer: ignored, as cudaFree reports an error
  st.used -= it->second;
  if (st.options.backed) {
    std::free(ptr);
  } else {
    st.space.give(reinterpret_cast<std::uintptr_t>(ptr), it->second);
  }
  st.live.erase(it);
  // cudaFree and cudaFreeHost block until the device is idle; model that.
  st.synchronize_all();
}

mem_info host_runtime::memory_info()
{
  std::lock_guard lock{state_->mutex};
  return {state_->options.capacity_bytes - state_->used, state_->options.capacity_bytes};
}

void host_runtime::prefetch(void const*, std::size_t, mem_location, cudaStream_t stream)
{
  std::lock_guard lock{state_->mutex};
  auto& s = state_->resolve(stream);  // validates the stream; migration is work on it
  s.enqueued += 1;
  state_->submitted(s);
}

void host_runtime::advise_preferred_location(void const* ptr, std::size_t bytes, mem_location where)
{
  constexpr std::size_t max_recorded = 4096;  // bounded: replays may advise millions of times
  std::lock_guard lock{state_->mutex};
  if (state_->advice.size() < max_recorded) { state_->advice.push_back({ptr, bytes, where}); }
}

std::vector<host_runtime_advice> host_runtime::advice() const
{
  std::lock_guard lock{state_->mutex};
  return state_->advice;
}

int host_runtime::current_device()
{
  return tls_current_device;
}

void host_runtime::set_device(int device)
{
  GPUMEM_EXPECTS(device >= 0 && device < state_->options.device_count, logic_error,
                 format("host_runtime: invalid device ", device, " (", state_->options.device_count,
                        " devices)"));
  tls_current_device = device;
}

int host_runtime::device_count() noexcept
{
  return state_->options.device_count;
}

int host_runtime::device_attribute(cudaDeviceAttr attr, int)
{
  switch (attr) {
    case cudaDevAttrPageableMemoryAccess:
    case cudaDevAttrConcurrentManagedAccess:
    case cudaDevAttrMemoryPoolsSupported:
      return 1;
    default:
      return 0;
  }
}

cudaEvent_t host_runtime::event_create()
{
  std::lock_guard lock{state_->mutex};
  ++state_->calls.event_create;
  auto* rec = new event_rec{};
  state_->events.insert(rec);
  return reinterpret_cast<cudaEvent_t>(rec);
}

void host_runtime::event_destroy(cudaEvent_t event) noexcept
{
  std::lock_guard lock{state_->mutex};
  auto* rec = reinterpret_cast<event_rec*>(event);
  if (state_->events.erase(rec) > 0) { delete rec; }
}

void host_runtime::event_record(cudaEvent_t event, cudaStream_t stream)
{
  std::lock_guard lock{state_->mutex};
  ++state_->calls.event_record;
  auto& e = state_->resolve(event);
  auto& s = state_->resolve(stream);
  state_->forbid_legacy_during_capture(s, "cudaEventRecord");
  e.stream   = &s;
  e.position = s.enqueued;
}

bool host_runtime::event_query(cudaEvent_t event)
{
  std::lock_guard lock{state_->mutex};
  ++state_->calls.event_query;
  state_->forbid_during_capture("cudaEventQuery");
  auto const& e = state_->resolve(event);
  return e.stream == nullptr || e.stream->completed >= e.position;
}

void host_runtime::event_synchronize(cudaEvent_t event)
{
  std::lock_guard lock{state_->mutex};
  ++state_->calls.synchronize;
  state_->forbid_during_capture("cudaEventSynchronize");
  auto const& e = state_->resolve(event);
  if (e.stream != nullptr) { state::sync_to(*e.stream, e.position); }
}

void host_runtime::stream_wait_event(cudaStream_t stream, cudaEvent_t event)
{
  std::lock_guard lock{state_->mutex};
  ++state_->calls.stream_wait_event;
  auto const& e = state_->resolve(event);
  auto& s       = state_->resolve(stream);
  state_->forbid_legacy_during_capture(s, "cudaStreamWaitEvent");
  if (e.stream == nullptr || e.stream == &s || e.stream->completed >= e.position) { return; }
  s.waits.push_back({s.enqueued, e.stream, e.position});
}

void host_runtime::stream_synchronize(cudaStream_t stream)
{
  std::lock_guard lock{state_->mutex};
  ++state_->calls.synchronize;
  state_->forbid_during_capture("cudaStreamSynchronize");
  auto& s = state_->resolve(stream);
  state::sync_to(s, s.enqueued);
}

void host_runtime::device_synchronize()
{
  std::lock_guard lock{state_->mutex};
  ++state_->calls.synchronize;
  state_->forbid_during_capture("cudaDeviceSynchronize");
  state_->synchronize_all();
}

void host_runtime::begin_global_capture(cudaStream_t stream)
{
  std::lock_guard lock{state_->mutex};
  GPUMEM_EXPECTS(state_->capturing == nullptr, logic_error,
                 "host runtime: a stream capture is already active (the model has one at a time)");
  state_->capturing           = &state_->resolve(stream);
  state_->capture_invalidated = false;
}

bool host_runtime::end_capture(cudaStream_t stream)
{
  std::lock_guard lock{state_->mutex};
  GPUMEM_EXPECTS(state_->capturing != nullptr && state_->capturing == &state_->resolve(stream),
                 logic_error, "host runtime: end_capture of a stream that is not being captured");
  state_->capturing = nullptr;
  return !std::exchange(state_->capture_invalidated, false);
}

// -- virtual memory ------------------------------------------------------------------------------

namespace {

/// The stand-in's cuda_error for what CUDA refuses as an invalid value.
void expect_valid(bool ok, std::string const& what)
{
  if (!ok) { throw cuda_error{cudaErrorInvalidValue, "host_runtime: virtual memory: " + what}; }
}

}  // namespace

void host_runtime::fail_next_maps(std::size_t count)
{
  std::lock_guard lock{state_->mutex};
  state_->map_failures_to_inject = count;
}

host_vmm_state host_runtime::vmm_state() const
{
  std::lock_guard lock{state_->mutex};
  auto const& v = state_->vmm;
  return {v.physical_bytes(), v.mapped_bytes(), v.handles(),
          v.mappings(),       v.reservations(), v.misuse_count()};
}

void host_runtime::vmm_check_mapped(void const* ptr, std::size_t bytes) const
{
  std::lock_guard lock{state_->mutex};
  state_->vmm.check_mapped(const_cast<void*>(ptr), bytes);
}

std::size_t host_runtime::vmm_granularity(int device)
{
  if (!state_->options.vmm_supported) {
    throw cuda_error{cudaErrorNotSupported,
                     format("host_runtime: device ", device,
                            " does not support virtual memory management "
                            "(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0)")};
  }
  return state_->options.vmm_granularity_bytes;
}

void* host_runtime::vmm_reserve(std::size_t bytes, std::size_t alignment)
{
  std::lock_guard lock{state_->mutex};
  return state_->vmm.reserve(bytes, alignment);
}

void host_runtime::vmm_unreserve(void* base, std::size_t bytes) noexcept
{
  std::lock_guard lock{state_->mutex};
  state_->vmm.unreserve(base, bytes);
}

vmm_handle host_runtime::vmm_create(std::size_t bytes, int device, bool shareable)
{
  std::lock_guard lock{state_->mutex};
  auto& st = *state_;
  ++st.calls.vmm_create;
  expect_valid(device >= 0 && device < st.options.device_count, format("invalid device ", device));
  st.charge(bytes, "physical memory");
  try {
    return st.vmm.create(bytes, shareable);
  } catch (...) {
    st.used -= bytes;
    throw;
  }
}

void host_runtime::vmm_release(vmm_handle handle) noexcept
{
  std::lock_guard lock{state_->mutex};
  ++state_->calls.vmm_release;
  state_->used -= state_->vmm.release(handle);
}

void host_runtime::vmm_map(void* ptr, std::size_t bytes, vmm_handle handle)
{
  std::lock_guard lock{state_->mutex};
  auto& st = *state_;
  ++st.calls.vmm_map;
  if (st.map_failures_to_inject > 0) {
    --st.map_failures_to_inject;
    throw cuda_error{cudaErrorUnknown, "host_runtime: virtual memory: injected map failure"};
  }
  st.vmm.map(ptr, bytes, handle);
}

void host_runtime::vmm_unmap(void* ptr, std::size_t bytes) noexcept
{
  std::lock_guard lock{state_->mutex};
  ++state_->calls.vmm_unmap;
  state_->used -= state_->vmm.unmap(ptr, bytes);
}

void host_runtime::vmm_set_access(void* ptr, std::size_t bytes, int device)
{
  std::lock_guard lock{state_->mutex};
  expect_valid(device >= 0 && device < state_->options.device_count,
               format("invalid device ", device));
  state_->vmm.set_access(ptr, bytes);
}

int host_runtime::vmm_export_fd(vmm_handle handle)
{
  std::lock_guard lock{state_->mutex};
  expect_valid(state_->vmm.shareable(handle),
               format("handle ", handle, " was not created shareable as a POSIX file descriptor"));
  int const fd = ::memfd_create("gpumem-vmm-handle", MFD_CLOEXEC);
  expect_valid(fd >= 0, "memfd_create failed");
  return fd;
}

}  // namespace gpumem::detail
