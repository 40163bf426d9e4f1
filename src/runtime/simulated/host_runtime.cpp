// The simulated device (the host stand-in for the CUDA runtime). See simulated_device.hpp for the
// model.
#include "host_pool_model.hpp"
#include "host_streams.hpp"
#include "host_vmm_model.hpp"

#include <gpumem/align.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/detail/stream_capture.hpp>
#include <gpumem/error.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace gpumem {
using namespace detail;  // the model's parts (the class itself is public)
using host_model::event_rec;
using host_model::stream_rec;
using host_model::wait_rec;
namespace {

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

struct simulated_device::state {
  explicit state(simulated_device_options const& o)
      : options{o},
        space{o.capacity_bytes},
        vmm{o.backed, o.vmm_granularity_bytes},
        pools{{[this](std::size_t bytes) { return take_device_memory(bytes); },
               [this](void* ptr, std::size_t bytes) { give_memory(ptr, bytes); },
               [this](cudaStream_t s) -> stream_rec& { return resolve(s); }, o.device_count}}
  {
  }

  simulated_device_options options;
  mutable std::mutex mutex;
  address_space space;
  std::unordered_map<void*, std::size_t> live;  // pointer -> footprint
  std::size_t used{};
  std::size_t peak{};
  std::size_t failures_to_inject{};
  cudaError_t injected_error{cudaErrorMemoryAllocation};  ///< what an injected failure reports
  std::size_t map_failures_to_inject{};
  std::size_t copy_failures_to_inject{};
  std::size_t copies_before_failures{};
  host_vmm_model vmm;
  host_model::host_pool_model pools;
  simulated_device_calls calls;
  std::vector<simulated_device_advice> advice;  ///< the first advise_preferred_location calls
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

  /// The work `e` captured has completed: its stream's, and what that stream waited for.
  static bool done(event_rec const& e)
  {
    return e.stream == nullptr ||
           (e.stream->completed >= e.position && std::ranges::all_of(e.waited, satisfied));
  }

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
    if (injected && injected_error != cudaErrorMemoryAllocation) {
      throw cuda_error{injected_error,
                       format("host_runtime: allocating ", bytes_str(bytes), " of ", what,
                              " failed (injected ", cudaGetErrorName(injected_error), ")")};
    }
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

  /// Device memory counted as used, or null when the capacity (or an injected failure) says no.
  void* take_device_memory(std::size_t bytes)
  {
    if (failures_to_inject > 0) {
      --failures_to_inject;
      return nullptr;
    }
    if (bytes > options.capacity_bytes - used) { return nullptr; }
    void* ptr = take_memory(bytes);
    if (ptr == nullptr) { return nullptr; }
    used += bytes;
    peak = std::max(peak, used);
    return ptr;
  }

  void give_memory(void* ptr, std::size_t bytes)
  {
    used -= bytes;
    if (options.backed) {
      std::free(ptr);
    } else {
      space.give(reinterpret_cast<std::uintptr_t>(ptr), bytes);
    }
  }

  /// A stream, event or device synchronization finished: the pools' release thresholds apply.
  void synchronized() { pools.synchronized(); }
};

simulated_device::simulated_device(simulated_device_options options)
    : state_{std::make_unique<state>(options)}
{
  GPUMEM_EXPECTS(options.granularity_bytes > 0 && is_pow2(options.granularity_bytes), logic_error,
                 format("host_runtime: granularity_bytes must be a power of two, got ",
                        options.granularity_bytes));
}

simulated_device::~simulated_device()
{
  for (auto& [ptr, size] : state_->live) {
    if (state_->options.backed) { std::free(ptr); }
  }
  for (auto* e : state_->events) { delete e; }
}

cudaStream_t simulated_device::create_stream()
{
  std::lock_guard lock{state_->mutex};
  auto& rec = state_->created.emplace_back(std::make_unique<stream_rec>());
  state_->created_set.insert(rec.get());
  return reinterpret_cast<cudaStream_t>(rec.get());
}

void simulated_device::enqueue(cudaStream_t stream, std::uint64_t count)
{
  std::lock_guard lock{state_->mutex};
  auto& s = state_->resolve(stream);
  s.enqueued += count;
  state_->submitted(s);
}

void simulated_device::complete(cudaStream_t stream)
{
  std::lock_guard lock{state_->mutex};
  state::advance(state_->resolve(stream));
}

void simulated_device::complete_all()
{
  std::lock_guard lock{state_->mutex};
  state_->synchronize_all();
}

std::uint64_t simulated_device::enqueued(cudaStream_t stream)
{
  std::lock_guard lock{state_->mutex};
  return state_->resolve(stream).enqueued;
}

std::uint64_t simulated_device::completed(cudaStream_t stream)
{
  std::lock_guard lock{state_->mutex};
  return state_->resolve(stream).completed;
}

void simulated_device::fail_next_allocations(std::size_t count)
{
  fail_next_allocations(count, cudaErrorMemoryAllocation);
}

void simulated_device::fail_next_allocations(std::size_t count, cudaError_t error)
{
  std::lock_guard lock{state_->mutex};
  state_->failures_to_inject = count;
  state_->injected_error     = error;
}

std::size_t simulated_device::used_bytes() const
{
  std::lock_guard lock{state_->mutex};
  return state_->used;
}

std::size_t simulated_device::peak_used_bytes() const
{
  std::lock_guard lock{state_->mutex};
  return state_->peak;
}

std::size_t simulated_device::live_allocations() const
{
  std::lock_guard lock{state_->mutex};
  return state_->live.size();
}

std::size_t simulated_device::live_events() const
{
  std::lock_guard lock{state_->mutex};
  return state_->events.size();
}

std::size_t simulated_device::live_pools() const
{
  std::lock_guard lock{state_->mutex};
  return state_->pools.created_pools();
}

simulated_device_calls simulated_device::calls() const
{
  std::lock_guard lock{state_->mutex};
  return state_->calls;
}

simulated_device_options const& simulated_device::options() const noexcept
{
  return state_->options;
}

void simulated_device::check_invariants() const
{
  std::lock_guard lock{state_->mutex};
  state_->vmm.check_invariants();
  std::size_t sum{state_->vmm.physical_bytes() + state_->pools.reserved_bytes()};
  for (auto const& [ptr, size] : state_->live) { sum += size; }
  GPUMEM_EXPECTS(sum == state_->used, logic_error,
                 format("host_runtime: used_bytes ", state_->used,
                        " != sum of live allocations, physical handles and pool reserves ", sum));
  GPUMEM_EXPECTS(state_->used <= state_->options.capacity_bytes, logic_error,
                 "host_runtime: used_bytes exceeds capacity");
  for (auto* s : const_cast<state&>(*state_).all_streams()) {
    GPUMEM_EXPECTS(s->completed <= s->enqueued, logic_error,
                   "host_runtime: a stream completed more than was enqueued");
  }
}

void* simulated_device::allocate(memory_kind kind, std::size_t bytes)
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
  if (st.failures_to_inject > 0) {
    --st.failures_to_inject;
    if (st.injected_error != cudaErrorMemoryAllocation) {
      throw cuda_error{
          st.injected_error,
          format("host_runtime: allocating ", bytes_str(bytes), " of ", to_string(kind),
                 " memory failed (injected ", cudaGetErrorName(st.injected_error), ")")};
    }
  }
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

void simulated_device::free(memory_kind, void* ptr) noexcept
{
  if (ptr == nullptr) { return; }
  std::lock_guard lock{state_->mutex};
  auto& st = *state_;
  ++st.calls.free;
  // cudaFree and cudaFreeHost block until the device is idle; model that.
  auto it = st.live.find(ptr);
  if (it == st.live.end()) {  // pool memory may be freed with cudaFree too
    if (st.pools.owns(ptr)) {
      st.synchronize_all();
      (void)st.pools.free_now(ptr);
      st.synchronized();
    }
    return;  // a foreign pointer is ignored, as cudaFree reports an error
  }
  st.give_memory(ptr, it->second);
  st.live.erase(it);
  st.synchronize_all();
  st.synchronized();
}

mem_info simulated_device::memory_info()
{
  std::lock_guard lock{state_->mutex};
  return {state_->options.capacity_bytes - state_->used, state_->options.capacity_bytes};
}

void simulated_device::prefetch(void const*, std::size_t, mem_location, cudaStream_t stream)
{
  std::lock_guard lock{state_->mutex};
  auto& s = state_->resolve(stream);  // validates the stream; migration is work on it
  s.enqueued += 1;
  state_->submitted(s);
}

void simulated_device::advise_preferred_location(void const* ptr, std::size_t bytes,
                                                 mem_location where)
{
  constexpr std::size_t max_recorded = 4096;  // bounded: replays may advise millions of times
  std::lock_guard lock{state_->mutex};
  if (state_->advice.size() < max_recorded) { state_->advice.push_back({ptr, bytes, where}); }
}

std::vector<simulated_device_advice> simulated_device::advice() const
{
  std::lock_guard lock{state_->mutex};
  return state_->advice;
}

int simulated_device::current_device()
{
  return tls_current_device;
}

void simulated_device::set_device(int device)
{
  GPUMEM_EXPECTS(device >= 0 && device < state_->options.device_count, logic_error,
                 format("host_runtime: invalid device ", device, " (", state_->options.device_count,
                        " devices)"));
  tls_current_device = device;
}

int simulated_device::device_count() noexcept
{
  return state_->options.device_count;
}

int simulated_device::device_attribute(cudaDeviceAttr attr, int)
{
  switch (attr) {
    case cudaDevAttrPageableMemoryAccess:
    case cudaDevAttrConcurrentManagedAccess:
    case cudaDevAttrMemoryPoolsSupported:
    case cudaDevAttrHostMemoryPoolsSupported:
      return 1;
    case cudaDevAttrMemoryPoolSupportedHandleTypes:
      return cudaMemHandleTypePosixFileDescriptor;
    default:
      return 0;
  }
}

cudaEvent_t simulated_device::event_create()
{
  std::lock_guard lock{state_->mutex};
  ++state_->calls.event_create;
  auto* rec = new event_rec{};
  state_->events.insert(rec);
  return reinterpret_cast<cudaEvent_t>(rec);
}

void simulated_device::event_destroy(cudaEvent_t event) noexcept
{
  std::lock_guard lock{state_->mutex};
  auto* rec = reinterpret_cast<event_rec*>(event);
  if (state_->events.erase(rec) > 0) { delete rec; }
}

void simulated_device::event_record(cudaEvent_t event, cudaStream_t stream)
{
  std::lock_guard lock{state_->mutex};
  ++state_->calls.event_record;
  auto& e = state_->resolve(event);
  auto& s = state_->resolve(stream);
  state_->forbid_legacy_during_capture(s, "cudaEventRecord");
  std::erase_if(s.waits, state::satisfied);
  e.stream   = &s;
  e.position = s.enqueued;
  e.waited   = s.waits;
}

bool simulated_device::event_query(cudaEvent_t event)
{
  std::lock_guard lock{state_->mutex};
  ++state_->calls.event_query;
  state_->forbid_during_capture("cudaEventQuery");
  return state::done(state_->resolve(event));
}

void simulated_device::event_synchronize(cudaEvent_t event)
{
  std::lock_guard lock{state_->mutex};
  ++state_->calls.synchronize;
  state_->forbid_during_capture("cudaEventSynchronize");
  auto const& e = state_->resolve(event);
  if (e.stream != nullptr) { state::sync_to(*e.stream, e.position); }
  for (auto const& w : e.waited) { state::sync_to(*w.dep, w.dep_at); }
  state_->synchronized();
}

void simulated_device::stream_wait_event(cudaStream_t stream, cudaEvent_t event)
{
  std::lock_guard lock{state_->mutex};
  ++state_->calls.stream_wait_event;
  auto const& e = state_->resolve(event);
  auto& s       = state_->resolve(stream);
  state_->forbid_legacy_during_capture(s, "cudaStreamWaitEvent");
  if (e.stream == nullptr || e.stream == &s) { return; }
  auto& known = s.waited_on[e.stream];
  known       = std::max(known, e.position);
  if (state::done(e)) { return; }
  s.waits.push_back({s.enqueued, e.stream, e.position});
  for (auto const& w : e.waited) {  // transitively: what e's stream waited for before the record
    if (!state::satisfied(w)) { s.waits.push_back({s.enqueued, w.dep, w.dep_at}); }
  }
}

void simulated_device::stream_synchronize(cudaStream_t stream)
{
  std::lock_guard lock{state_->mutex};
  ++state_->calls.synchronize;
  state_->forbid_during_capture("cudaStreamSynchronize");
  auto& s = state_->resolve(stream);
  state::sync_to(s, s.enqueued);
  state_->synchronized();
}

bool simulated_device::stream_capturing(cudaStream_t stream)
{
  std::lock_guard lock{state_->mutex};
  auto const& s = state_->resolve(stream);
  return state_->capturing != nullptr && (state_->capturing == &s || &s == &state_->legacy);
}

void simulated_device::device_synchronize()
{
  std::lock_guard lock{state_->mutex};
  ++state_->calls.synchronize;
  state_->forbid_during_capture("cudaDeviceSynchronize");
  state_->synchronize_all();
  state_->synchronized();
}

void simulated_device::memcpy_async(void* dst, void const* src, std::size_t bytes,
                                    cudaStream_t stream)
{
  std::lock_guard lock{state_->mutex};
  auto& st = *state_;
  ++st.calls.memcpy;
  (void)st.resolve(stream);  // an unknown stream is misuse
  if (st.copy_failures_to_inject > 0 && st.copies_before_failures > 0) {
    --st.copies_before_failures;
  } else if (st.copy_failures_to_inject > 0) {
    --st.copy_failures_to_inject;
    throw cuda_error{cudaErrorUnknown, "host_runtime: injected copy failure"};
  }
  st.vmm.check_copy(src, bytes, "source");
  st.vmm.check_copy(dst, bytes, "destination");
  if (st.options.backed && bytes > 0) { std::memmove(dst, src, bytes); }
  st.calls.memcpy_bytes += bytes;
}

void simulated_device::memset_async(void* dst, int value, std::size_t bytes, cudaStream_t stream)
{
  std::lock_guard lock{state_->mutex};
  auto& st = *state_;
  ++st.calls.memset;
  (void)st.resolve(stream);  // an unknown stream is misuse
  st.vmm.check_copy(dst, bytes, "destination");
  if (st.options.backed && bytes > 0) { std::memset(dst, value, bytes); }
}

void simulated_device::fail_next_copies(std::size_t count, std::size_t skip)
{
  std::lock_guard lock{state_->mutex};
  state_->copy_failures_to_inject = count;
  state_->copies_before_failures  = skip;
}

void simulated_device::begin_global_capture(cudaStream_t stream)
{
  std::lock_guard lock{state_->mutex};
  GPUMEM_EXPECTS(state_->capturing == nullptr, logic_error,
                 "host runtime: a stream capture is already active (the model has one at a time)");
  state_->capturing           = &state_->resolve(stream);
  state_->capture_invalidated = false;
}

bool simulated_device::end_capture(cudaStream_t stream)
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

void simulated_device::fail_next_maps(std::size_t count)
{
  std::lock_guard lock{state_->mutex};
  state_->map_failures_to_inject = count;
}

simulated_vmm_state simulated_device::vmm_state() const
{
  std::lock_guard lock{state_->mutex};
  auto const& v = state_->vmm;
  return {v.physical_bytes(), v.mapped_bytes(), v.handles(),
          v.mappings(),       v.reservations(), v.misuse_count()};
}

void simulated_device::vmm_check_mapped(void const* ptr, std::size_t bytes) const
{
  std::lock_guard lock{state_->mutex};
  state_->vmm.check_mapped(const_cast<void*>(ptr), bytes);
}

std::size_t simulated_device::vmm_granularity(int device)
{
  if (device < 0 || device >= state_->options.device_count) {  // as CUDA: the device is checked
    throw cuda_error{cudaErrorInvalidDevice,
                     format("host_runtime: virtual memory: invalid device ", device, " (",
                            state_->options.device_count, " devices)")};
  }
  if (!state_->options.vmm_supported) {
    throw cuda_error{cudaErrorNotSupported,
                     format("host_runtime: device ", device,
                            " does not support virtual memory management "
                            "(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0)")};
  }
  return state_->options.vmm_granularity_bytes;
}

void* simulated_device::vmm_reserve(std::size_t bytes, std::size_t alignment)
{
  std::lock_guard lock{state_->mutex};
  return state_->vmm.reserve(bytes, alignment);
}

void simulated_device::vmm_unreserve(void* base, std::size_t bytes) noexcept
{
  std::lock_guard lock{state_->mutex};
  state_->vmm.unreserve(base, bytes);
}

vmm_handle simulated_device::vmm_create(std::size_t bytes, int device,
                                        vmm_handle_properties properties)
{
  std::lock_guard lock{state_->mutex};
  auto& st = *state_;
  ++st.calls.vmm_create;
  expect_valid(device >= 0 && device < st.options.device_count, format("invalid device ", device));
  expect_valid(!properties.gpu_direct_rdma || st.options.vmm_gpu_direct_rdma,
               format("device ", device,
                      " cannot make GPUDirect RDMA capable physical allocations "
                      "(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED is 0)"));
  st.charge(bytes, "physical memory");
  try {
    return st.vmm.create(bytes, device, properties);
  } catch (...) {
    st.used -= bytes;
    throw;
  }
}

bool simulated_device::vmm_gpu_direct_rdma_supported(int device)
{
  std::lock_guard lock{state_->mutex};
  expect_valid(device >= 0 && device < state_->options.device_count,
               format("invalid device ", device));
  return state_->options.vmm_gpu_direct_rdma;
}

vmm_allocation_info simulated_device::vmm_allocation_at(void const* ptr)
{
  std::lock_guard lock{state_->mutex};
  return state_->vmm.allocation_at(ptr);
}

void simulated_device::vmm_release(vmm_handle handle) noexcept
{
  std::lock_guard lock{state_->mutex};
  ++state_->calls.vmm_release;
  state_->used -= state_->vmm.release(handle);
}

void simulated_device::vmm_map(void* ptr, std::size_t bytes, vmm_handle handle)
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

void simulated_device::vmm_unmap(void* ptr, std::size_t bytes) noexcept
{
  std::lock_guard lock{state_->mutex};
  ++state_->calls.vmm_unmap;
  state_->used -= state_->vmm.unmap(ptr, bytes);
}

bool simulated_device::vmm_unmap_run(void* ptr, std::size_t bytes) noexcept
{
  std::lock_guard lock{state_->mutex};
  auto const runs = state_->vmm.whole_mappings(ptr, bytes);
  if (runs.empty()) { return false; }
  ++state_->calls.vmm_unmap;
  for (auto const& [at, n] : runs) { state_->used -= state_->vmm.unmap(at, n); }
  return true;
}

void simulated_device::vmm_set_access(void* ptr, std::size_t bytes, int device)
{
  std::lock_guard lock{state_->mutex};
  expect_valid(device >= 0 && device < state_->options.device_count,
               format("invalid device ", device));
  state_->vmm.set_access(ptr, bytes, device);
}

bool simulated_device::vmm_accessible_by(void const* ptr, int device) const
{
  std::lock_guard lock{state_->mutex};
  return state_->vmm.accessible_by(ptr, device);
}

int simulated_device::vmm_export_fd(vmm_handle handle)
{
  std::lock_guard lock{state_->mutex};
  expect_valid(state_->vmm.shareable(handle),
               format("handle ", handle, " was not created shareable as a POSIX file descriptor"));
  int const fd = ::memfd_create("gpumem-vmm-handle", MFD_CLOEXEC);
  expect_valid(fd >= 0, "memfd_create failed");
  // The descriptor names the handle, so that vmm_import_fd (in this process) finds its memory.
  if (::pwrite(fd, &handle, sizeof handle, 0) != static_cast<ssize_t>(sizeof handle)) {
    ::close(fd);
    expect_valid(false, "cannot write the exported handle's descriptor");
  }
  return fd;
}

vmm_handle simulated_device::vmm_import_fd(int fd)
{
  vmm_handle exported{};
  expect_valid(::pread(fd, &exported, sizeof exported, 0) == static_cast<ssize_t>(sizeof exported),
               format("file descriptor ", fd, " is not an exported physical allocation"));
  std::lock_guard lock{state_->mutex};
  return state_->vmm.import(exported);
}

}  // namespace gpumem

namespace gpumem {

// -- memory pools: the model in host_pool_model.cpp, under the runtime's lock ------------------

int simulated_device::driver_version() noexcept
{
  return 13000;
}

#define GPUMEM_HOST_POOL_CALL(expr)      \
  do {                                   \
    std::lock_guard lock{state_->mutex}; \
    return state_->pools.expr;           \
  } while (0)

cudaError_t simulated_device::mem_pool_create(cudaMemPool_t* pool,
                                              cudaMemPoolProps const* props) noexcept
{
  GPUMEM_HOST_POOL_CALL(create(pool, props));
}
cudaError_t simulated_device::mem_pool_destroy(cudaMemPool_t pool) noexcept
{
  GPUMEM_HOST_POOL_CALL(destroy(pool));
}
cudaError_t simulated_device::mem_pool_set_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                                     void* value) noexcept
{
  GPUMEM_HOST_POOL_CALL(set_attribute(pool, attr, value));
}
cudaError_t simulated_device::mem_pool_get_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                                     void* value) noexcept
{
  GPUMEM_HOST_POOL_CALL(get_attribute(pool, attr, value));
}
cudaError_t simulated_device::mem_pool_set_access(cudaMemPool_t pool, cudaMemAccessDesc const* list,
                                                  std::size_t count) noexcept
{
  GPUMEM_HOST_POOL_CALL(set_access(pool, list, count));
}
cudaError_t simulated_device::mem_pool_get_access(cudaMemAccessFlags* flags, cudaMemPool_t pool,
                                                  cudaMemLocation* location) noexcept
{
  GPUMEM_HOST_POOL_CALL(get_access(flags, pool, location));
}
cudaError_t simulated_device::mem_pool_trim_to(cudaMemPool_t pool, std::size_t keep) noexcept
{
  GPUMEM_HOST_POOL_CALL(trim_to(pool, keep));
}
cudaError_t simulated_device::malloc_from_pool_async(void** ptr, std::size_t bytes,
                                                     cudaMemPool_t pool,
                                                     cudaStream_t stream) noexcept
{
  GPUMEM_HOST_POOL_CALL(allocate(ptr, bytes, pool, stream));
}
cudaError_t simulated_device::device_get_default_mem_pool(cudaMemPool_t* pool, int device) noexcept
{
  GPUMEM_HOST_POOL_CALL(default_pool(pool, device));
}
cudaError_t simulated_device::device_get_mem_pool(cudaMemPool_t* pool, int device) noexcept
{
  GPUMEM_HOST_POOL_CALL(current_pool(pool, device));
}
cudaError_t simulated_device::device_set_mem_pool(int device, cudaMemPool_t pool) noexcept
{
  GPUMEM_HOST_POOL_CALL(set_current_pool(device, pool));
}
cudaError_t simulated_device::mem_pool_export_to_shareable_handle(
    void* handle, cudaMemPool_t pool, cudaMemAllocationHandleType type) noexcept
{
  GPUMEM_HOST_POOL_CALL(export_pool(handle, pool, type));
}
cudaError_t simulated_device::mem_pool_import_from_shareable_handle(
    cudaMemPool_t* pool, void* handle, cudaMemAllocationHandleType type) noexcept
{
  GPUMEM_HOST_POOL_CALL(import_pool(pool, handle, type));
}
cudaError_t simulated_device::mem_pool_export_pointer(cudaMemPoolPtrExportData* data,
                                                      void* ptr) noexcept
{
  GPUMEM_HOST_POOL_CALL(export_pointer(data, ptr));
}
cudaError_t simulated_device::mem_pool_import_pointer(void** ptr, cudaMemPool_t pool,
                                                      cudaMemPoolPtrExportData* data) noexcept
{
  GPUMEM_HOST_POOL_CALL(import_pointer(ptr, pool, data));
}

#undef GPUMEM_HOST_POOL_CALL

cudaError_t simulated_device::free_async(void* ptr, cudaStream_t stream) noexcept
{
  std::lock_guard lock{state_->mutex};
  auto& st = *state_;
  auto it  = st.live.find(ptr);
  if (it == st.live.end()) { return st.pools.free_async(ptr, stream); }  // pool memory (or bad)
  // cudaMalloc memory freed in stream order
  st.give_memory(ptr, it->second);
  st.live.erase(it);
  return cudaSuccess;
}

cudaError_t simulated_device::device_can_access_peer(int* can, int device, int peer) noexcept
{
  int const n = state_->options.device_count;
  if (can == nullptr || device < 0 || device >= n || peer < 0 || peer >= n) {
    return cudaErrorInvalidDevice;
  }
  *can = device != peer && state_->options.peer_access ? 1 : 0;
  return cudaSuccess;
}

cudaError_t simulated_device::stream_get_device(cudaStream_t stream, int* device) noexcept
{
  std::lock_guard lock{state_->mutex};
  try {
    (void)state_->resolve(stream);
  } catch (...) {
    return cudaErrorInvalidResourceHandle;
  }
  *device = tls_current_device;  // the model's streams belong to the device current at use
  return cudaSuccess;
}

cudaError_t simulated_device::pointer_attributes(void const* ptr, cudaMemoryType* type, int* device,
                                                 cudaMemPool_t* pool, void const** base,
                                                 std::size_t* size) noexcept
{
  std::lock_guard lock{state_->mutex};
  auto& st = *state_;
  *type = cudaMemoryTypeUnregistered, *device = -1, *pool = nullptr, *base = nullptr, *size = 0;
  if (st.pools.attributes(ptr, type, device, pool, base, size)) { return cudaSuccess; }
  auto it = st.live.find(const_cast<void*>(ptr));
  if (it != st.live.end()) {
    *type = cudaMemoryTypeDevice, *device = 0, *base = ptr, *size = it->second;
  }
  return cudaSuccess;
}

}  // namespace gpumem
