// python/src/torch_allocator/torch_allocator.cpp — the shared library that PyTorch's
// torch.cuda.memory.CUDAPluggableAllocator loads (gpumem/_torch_allocator.so).
//
// Exports, with C linkage, for PyTorch:
//   void* gpumem_torch_malloc(ssize_t size, int device, cudaStream_t stream);
//   void  gpumem_torch_free(void* ptr, ssize_t size, int device, cudaStream_t stream);
//   void  gpumem_torch_empty_cache(void);   // CUDAPluggableAllocator's reset_fn (empty_cache)
//   void  gpumem_torch_begin_allocate_to_pool(int, MempoolId_t, std::function<bool(cudaStream_t)>);
//   void  gpumem_torch_end_allocate_to_pool(int, MempoolId_t);    // the CUDA graph pool hooks
//   void  gpumem_torch_release_pool(int, MempoolId_t);            // (see "CUDA graphs" below)
// and, for gpumem.torch (ctypes):
//   int   gpumem_torch_configure(int device, char const* spec, void* runtime, int simulated);
//   int   gpumem_torch_set_resource(int device, void* resource);  // device -1: every device
//   int   gpumem_torch_set_resource2(int device, void* resource, int on_cuda);
//   void  gpumem_torch_set_resource_calls(void* alloc, void* dealloc, void* trim);  // see below
//   void* gpumem_torch_get_resource(int device);
//   int   gpumem_torch_release(int device);
//   int   gpumem_torch_stats(int device, unsigned long long* out, int n);
//   void  gpumem_torch_reset_peak(int device);
//   void  gpumem_torch_reset_accumulated(int device);
//   int   gpumem_torch_record_start(char const* path);
//   int   gpumem_torch_record_start2(char const* path, int (*frames)(char* buf, int cap));
//   int   gpumem_torch_record_stop(void);
//   char const* gpumem_torch_last_error(void);
//   void* gpumem_torch_try_malloc(ssize_t size, int device, cudaStream_t stream);  // no throw
//   int   gpumem_torch_has_c10(void);  // 1 when OOM raises torch.OutOfMemoryError
//   void  gpumem_torch_set_graph_support(char const* missing);
//   int   gpumem_torch_graph_pools(int device, unsigned long long* out, int n);
//   int   gpumem_torch_test_begin_pool(int device, u64 first, u64 second, void* stream);
//
// Each device has a slot: either a resource object set by gpumem.torch (whose Python object is
// kept alive for the life of the process), or a spec (the device's own, else the default one)
// from which the slot builds its resource stack on the device's first allocation. The build
// happens once, under the slot's mutex (double-checked: the hot path is one atomic load), over a
// metered runtime, so that the bytes the stack holds from the device are known (the "reserved"
// statistics) without help from the resource.
//
// PyTorch calls malloc/free from any thread, without the GIL: the resource must be thread-safe
// (every stack a spec builds is: the suballocators and adaptors are).
//
// Statistics: per device, atomic counters of what PyTorch asked for (bytes and blocks: current,
// peak, allocated, freed), the bytes held from the device (current, peak, allocated, freed and
// the number of device allocations / frees, from the metered runtime), allocation retries and
// out-of-memory errors. An allocation that runs out of memory first gives free memory back
// (resource_stack::trim: caches flush, virtual-memory and CUDA pools trim) and tries once more
// (num_alloc_retries); failing again it counts in num_ooms and raises.
//
// Recording (gpumem.torch.record): every malloc and free is written to a trace, under one mutex.
// With a frames callback (record(frames=True)), each allocate row also carries the allocating
// call stack: the callback (a ctypes function, which takes the GIL itself) writes the calling
// thread's Python stack into a thread-local buffer. It is called before the recording's mutex is
// taken and with no lock of this library held, so a thread that waits for the GIL holds nothing
// another thread (one holding the GIL) could wait for; frees never call it. Without the callback
// the recording path is as before: no Python, no GIL.
//
// Errors: malloc on a device with no resource, or a failing resource, throws through PyTorch.
// Built against PyTorch's c10 (GPUMEM_WITH_C10), an allocation failure is rethrown as
// c10::OutOfMemoryError carrying gpumem's message, which PyTorch raises as torch.OutOfMemoryError;
// without c10 the gpumem exception reaches PyTorch, which raises RuntimeError with the message
// (gpumem.torch turns that into torch.OutOfMemoryError where it can; see torch.py).
#include <gpumem/detail/diagnostics/allocation_logger.hpp>
#include <gpumem/detail/runtime.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/spec/resource_factory.hpp>
#include <gpumem/spec/resource_spec.hpp>
#include <gpumem/runtime/metered_runtime.hpp>

#include <sys/types.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <exception>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#ifdef GPUMEM_WITH_C10
#include <c10/util/Exception.h>
#endif

#define GPUMEM_TORCH_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using gpumem::mr::device_memory_resource;
using u64 = unsigned long long;

constexpr int max_devices = 64;

void raise_to(std::atomic<u64>& peak, u64 value) noexcept
{
  u64 seen = peak.load(std::memory_order_relaxed);
  while (seen < value && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {}
}

/// A current / peak / allocated / freed quadruple, as PyTorch reports each statistic.
struct stat {
  std::atomic<u64> current{}, peak{}, allocated{}, freed{};
  void add(u64 n) noexcept
  {
    allocated.fetch_add(n, std::memory_order_relaxed);
    raise_to(peak, current.fetch_add(n, std::memory_order_relaxed) + n);
  }
  void sub(u64 n) noexcept
  {
    freed.fetch_add(n, std::memory_order_relaxed);
    current.fetch_sub(n, std::memory_order_relaxed);
  }
  void reset_peak() noexcept { peak.store(current.load(std::memory_order_relaxed)); }
  void reset_accumulated() noexcept
  {
    allocated.store(0);
    freed.store(0);
  }
};

/// Counts what the stack takes from the device and gives back (told by the metered runtime).
struct device_meter final : gpumem::trace::chunk_observer {
  stat chunks_bytes;  // current/peak unused: the meter's held bytes are authoritative
  std::atomic<u64> device_allocs{}, device_frees{};
  void chunk_added(std::uintptr_t, std::size_t bytes) noexcept override
  {
    chunks_bytes.allocated.fetch_add(bytes, std::memory_order_relaxed);
    device_allocs.fetch_add(1, std::memory_order_relaxed);
  }
  void chunk_removed(std::uintptr_t, std::size_t bytes) noexcept override
  {
    chunks_bytes.freed.fetch_add(bytes, std::memory_order_relaxed);
    device_frees.fetch_add(1, std::memory_order_relaxed);
  }
};

using pool_id       = std::pair<unsigned long long, unsigned long long>;  // c10::cuda::MempoolId_t
using stream_filter = std::function<bool(cudaStream_t)>;

/// A block of the device's main resource that PyTorch freed while a graph was being captured: the
/// graph may use its address at every replay, so it goes back only when the pool is released.
struct held_block {
  void* ptr;
  std::size_t bytes;
  cudaStream_t stream;
};

/// The memory of one CUDA graph pool: chunks from the device (cudaMalloc through the runtime),
/// carved into blocks. A block freed on a stream is reused only by later allocations on that same
/// stream (which the capture orders after the free), never by another stream's, so that no event
/// or synchronization is ever needed: a capture forbids them (gpumem's stream-ordered pools
/// synchronize the device to move free memory between streams). Not thread-safe (the slot's
/// graph_mutex guards it).
class private_pool {
 public:
  static constexpr std::size_t alignment         = 512;
  static constexpr std::size_t chunk_granularity = std::size_t{2} << 20;

  explicit private_pool(gpumem::runtime& rt) : rt_{rt} {}
  ~private_pool()
  {
    for (auto const& c : chunks_) { rt_.free(gpumem::memory_kind::device, c.first); }
  }
  private_pool(private_pool const&)            = delete;
  private_pool& operator=(private_pool const&) = delete;

  void* allocate(std::size_t bytes, cudaStream_t stream)
  {
    std::size_t const n = round_up(std::max<std::size_t>(bytes, 1), alignment);
    auto& list          = free_[stream];
    auto it             = list.lower_bound(n);
    if (it == list.end()) {
      std::size_t const size = round_up(n, chunk_granularity);
      void* const p          = rt_.allocate(gpumem::memory_kind::device, size);  // may throw
      chunks_.emplace_back(p, size);
      auto const addr = reinterpret_cast<std::uintptr_t>(p);
      blocks_[addr]   = block{size, chunks_.size() - 1, stream, true};
      it              = list.emplace(size, addr);
    }
    std::size_t const size    = it->first;
    std::uintptr_t const addr = it->second;
    list.erase(it);
    block& b = blocks_.at(addr);
    b.free   = false;
    if (size - n >= alignment) {  // the rest stays free, on the same stream
      b.size            = n;
      blocks_[addr + n] = block{size - n, b.chunk, stream, true};
      list.emplace(size - n, addr + n);
    }
    return reinterpret_cast<void*>(addr);
  }

  void deallocate(void* ptr, cudaStream_t stream)
  {
    auto it = blocks_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == blocks_.end() || it->second.free) { return; }
    it->second.free   = true;
    it->second.stream = stream;
    // Merge with free neighbours of the same chunk and stream.
    if (auto next = std::next(it); next != blocks_.end() && mergeable(it->second, next->second)) {
      unlist(next);
      it->second.size += next->second.size;
      blocks_.erase(next);
    }
    if (it != blocks_.begin()) {
      if (auto prev = std::prev(it); mergeable(prev->second, it->second)) {
        unlist(prev);
        prev->second.size += it->second.size;
        blocks_.erase(it);
        it = prev;
      }
    }
    free_[stream].emplace(it->second.size, it->first);
  }

  [[nodiscard]] std::size_t chunk_bytes() const noexcept
  {
    std::size_t n = 0;
    for (auto const& c : chunks_) { n += c.second; }
    return n;
  }

 private:
  struct block {
    std::size_t size;
    std::size_t chunk;
    cudaStream_t stream;
    bool free;
  };

  static std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

  static bool mergeable(block const& a, block const& b) noexcept
  {
    return a.free && b.free && a.chunk == b.chunk && a.stream == b.stream;
  }

  void unlist(std::map<std::uintptr_t, block>::iterator it)
  {
    auto& list         = free_[it->second.stream];
    auto [first, last] = list.equal_range(it->second.size);
    for (auto i = first; i != last; ++i) {
      if (i->second == it->first) {
        list.erase(i);
        return;
      }
    }
  }

  gpumem::runtime& rt_;
  std::vector<std::pair<void*, std::size_t>> chunks_;
  std::map<std::uintptr_t, block> blocks_;  // every block of every chunk, by address
  std::map<cudaStream_t, std::multimap<std::size_t, std::uintptr_t>> free_;  // by stream, size
};

/// The private memory of one CUDA graph pool (PyTorch's MempoolId_t): what the graphs captured
/// into it allocate comes from a pool of its own, kept until PyTorch releases the pool.
struct graph_pool {
  pool_id id;
  std::unique_ptr<gpumem::trace::metered_runtime> meter;  // what the pool holds from the device
  std::unique_ptr<private_pool> memory;
  std::vector<stream_filter> filters;  // one per capture allocating to it now
  int uses{};                          // captures begun on it and not yet released
  u64 live{};                          // its blocks PyTorch holds
  std::vector<held_block> held;
};

// -- resource objects of the Python package --------------------------------------------------
// The package's extension (_gpumem) and this library each carry their own C++ runtime
// (-static-libstdc++), so an exception thrown by one of its resources cannot be caught here (the
// process would abort). Its resource objects are therefore called through two C functions the
// package registers (gpumem_torch_set_resource_calls), which catch there and report an error kind
// and a message; package_resource throws the same error again, as this library's own.

/// (object, bytes, stream, kind out, message out, message capacity) -> pointer or nullptr; kind:
/// 0 none, 1 out_of_memory, 2 another bad_alloc, 3 logic_error, 4 anything else.
using allocate_call   = void* (*)(void*, std::size_t, void*, int*, char*, std::size_t) noexcept;
using deallocate_call = void (*)(void*, void*, std::size_t, void*) noexcept;
using trim_call       = int (*)(void*) noexcept;  ///< 1: trimmed; 0: cannot (or failed)
std::atomic<allocate_call> package_allocate{};
std::atomic<deallocate_call> package_deallocate{};
std::atomic<trim_call> package_trim{};

[[noreturn]] void rethrow_package_error(int kind, char const* message)
{
  switch (kind) {
    case 1:
      throw gpumem::out_of_memory{message};
    case 2:
      throw gpumem::bad_alloc{message};
    case 3:
      throw gpumem::logic_error{message};
    default:
      throw std::runtime_error{message};
  }
}

/// A resource object of the Python package, called through the registered C functions.
class package_resource final : public device_memory_resource {
 public:
  package_resource(void* object, allocate_call allocate, deallocate_call deallocate,
                   trim_call trim) noexcept
      : object_{object}, allocate_{allocate}, deallocate_{deallocate}, trim_{trim}
  {
  }
  [[nodiscard]] void* object() const noexcept { return object_; }
  /// Gives the object's free memory back where it can; false when it cannot.
  bool trim() const noexcept { return trim_ != nullptr && trim_(object_) != 0; }

 private:
  void* do_allocate(std::size_t bytes, gpumem::cuda_stream_view stream) override
  {
    int kind = 0;
    // Written by the package only when the allocation fails: not cleared on every allocation.
    std::array<char, 2048> message;  // NOLINT(cppcoreguidelines-pro-type-member-init)
    void* p = allocate_(object_, bytes, stream.value(), &kind, message.data(), message.size());
    if (kind != 0) { rethrow_package_error(kind, message.data()); }
    return p;
  }
  void do_deallocate(void* p, std::size_t bytes, gpumem::cuda_stream_view stream) noexcept override
  {
    deallocate_(object_, p, bytes, stream.value());
  }
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override
  {
    return this == &other;
  }

  void* object_;  ///< the package's resource (a device_memory_resource of its own runtime)
  allocate_call allocate_;
  deallocate_call deallocate_;
  trim_call trim_;
};

struct device_slot {
  std::atomic<device_memory_resource*> resource{};
  // Resource objects of the package set for this device (each kept: a malloc may still be using
  // the one replaced); the last one is the one in `resource` when `object` is set.
  std::vector<std::unique_ptr<package_resource>> packages;
  void* object{};          // the package's resource object set last (what get_resource reports)
  std::mutex build_mutex;  // guards the members below
  std::string spec;        // this device's own spec (empty: the default one)
  std::unique_ptr<gpumem::trace::metered_runtime> meter;
  std::unique_ptr<device_meter> observer;
  std::unique_ptr<gpumem::spec::resource_stack> stack;
  gpumem::spec::footprint_source const* footprint{};  // the stack's, if a layer bypasses the meter
  std::atomic<u64> footprint_peak{};  // for stacks whose layer bypasses the runtime (CUDA pools)

  bool on_cuda{};  // the resource talks to CUDA (not a test's host stand-in): capture is checked

  stat bytes, blocks;
  std::atomic<u64> retries{}, ooms{};

  // CUDA graph pools (see "CUDA graphs" below): guarded by graph_mutex; the two counters let
  // malloc and free skip the lock when no graph pool exists.
  std::mutex graph_mutex;
  std::vector<std::unique_ptr<graph_pool>> graph_pools;
  std::unordered_map<void*, graph_pool*> graph_owner;  // a graph pool's block -> its pool
  std::atomic<int> pools_allocating{};  // graph pools between begin and end of allocating
  std::atomic<int> pools_alive{};       // graph pools not yet destroyed
};

// Never destroyed: PyTorch may free tensors during interpreter shutdown, and the runtime below a
// stack (CUDA, or a test's host stand-in) may be gone by the time static destructors would run.
auto& slots = *new std::array<device_slot, max_devices>;

std::mutex config_mutex;  // guards the defaults below
std::string default_spec;
bool every_device{};  // the default spec serves every device
gpumem::runtime* config_runtime{};
bool config_simulated{};

thread_local std::string last_error;

// Recording (gpumem.torch.record): a trace of every allocation and free, all devices.
using frames_fn = int (*)(char* buf, int cap);
std::atomic<bool> recording{};
std::atomic<frames_fn> record_frames{};  // set while a recording with frames runs
std::mutex record_mutex;
std::unique_ptr<gpumem::detail::allocation_logger> recorder;

void record(char const* action, void const* ptr, std::size_t bytes, cudaStream_t stream) noexcept
{
  if (!recording.load(std::memory_order_relaxed)) { return; }
  std::lock_guard lock{record_mutex};
  // Never a captured C++ stack: a recording with frames gets them from record_allocate only.
  if (recorder) { recorder->log(action, ptr, bytes, stream, {}); }
}

/// record("allocate", ...), with the caller's Python stack when the recording asks for frames.
void record_allocate(void const* ptr, std::size_t bytes, cudaStream_t stream) noexcept
{
  if (!recording.load(std::memory_order_relaxed)) { return; }
  frames_fn const frames = record_frames.load(std::memory_order_acquire);
  if (frames == nullptr) { return record("allocate", ptr, bytes, stream); }
  constexpr int capacity = 16 << 10;
  thread_local std::array<char, capacity> buffer;
  int const n = std::clamp(frames(buffer.data(), capacity), 0, capacity);  // takes the GIL
  std::lock_guard lock{record_mutex};
  if (recorder) {
    recorder->log("allocate", ptr, bytes, stream,
                  std::string_view{buffer.data(), static_cast<std::size_t>(n)});
  }
}

/// True when `stream` is capturing a CUDA graph (errors, e.g. no GPU, read as not capturing).
bool stream_is_capturing(cudaStream_t stream) noexcept
{
  cudaStreamCaptureStatus status{cudaStreamCaptureStatusNone};
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return status != cudaStreamCaptureStatusNone;
}

[[noreturn]] void fail(std::string const& msg, bool out_of_memory)
{
#ifdef GPUMEM_WITH_C10
  if (out_of_memory) { throw c10::OutOfMemoryError({__func__, __FILE__, __LINE__}, msg); }
  throw c10::Error({__func__, __FILE__, __LINE__}, msg);
#else
  if (out_of_memory) { throw gpumem::out_of_memory{msg}; }
  throw gpumem::logic_error{msg};
#endif
}

device_slot* slot_of(int device) noexcept
{
  return (device >= 0 && device < max_devices) ? &slots[device] : nullptr;
}

/// Bytes the device's stack holds from the device (0 when unknown: a resource object).
u64 held_bytes(device_slot& s)
{
  if (!s.stack) { return 0; }
  if (s.footprint != nullptr) { return s.footprint->held_bytes(); }
  return s.meter->held_bytes();
}

/// Builds the slot's stack from its spec, on `device`; the caller holds s.build_mutex.
device_memory_resource* build(device_slot& s, int device)
{
  std::string spec;
  gpumem::runtime* rt{};
  bool simulated{};
  {
    std::lock_guard lock{config_mutex};
    spec      = s.spec.empty() && every_device ? default_spec : s.spec;
    rt        = config_runtime;
    simulated = config_simulated;
  }
  if (spec.empty()) { return nullptr; }
  auto& inner        = rt != nullptr ? *rt : gpumem::cuda_device();
  int const previous = inner.current_device();
  if (previous != device) { inner.set_device(device); }
  try {
    auto meter    = std::make_unique<gpumem::trace::metered_runtime>(inner);
    auto observer = std::make_unique<device_meter>();
    meter->observe(observer.get());
    auto stack = std::make_unique<gpumem::spec::resource_stack>(
        gpumem::spec::build(spec, *meter, simulated));
    s.meter     = std::move(meter);
    s.observer  = std::move(observer);
    s.footprint = stack->footprint();
    s.on_cuda   = rt == nullptr;
    s.stack     = std::move(stack);
  } catch (...) {
    if (previous != device) { inner.set_device(previous); }
    throw;
  }
  if (previous != device) { inner.set_device(previous); }
  return &s.stack->top();
}

device_memory_resource& resource_of(device_slot& s, int device)
{
  if (auto* r = s.resource.load(std::memory_order_acquire)) { return *r; }
  std::lock_guard lock{s.build_mutex};
  if (auto* r = s.resource.load(std::memory_order_acquire)) { return *r; }
  device_memory_resource* r{};
  try {
    r = build(s, device);
  } catch (std::exception const& e) {
    fail("gpumem torch allocator: cannot build the resource for CUDA device " +
             std::to_string(device) + ": " + e.what(),
         false);
  }
  if (r == nullptr) {
    fail("gpumem torch allocator: no gpumem resource is configured for CUDA device " +
             std::to_string(device) +
             " (gpumem.torch.use() was given other devices; name this one too, e.g. "
             "gpumem.torch.use(spec, devices=None) for every device)",
         false);
  }
  s.resource.store(r, std::memory_order_release);
  return *r;
}

/// Gives the free memory of the slot's resource back where it can (a stack's layers; a resource
/// object of the package that is trimmable); false when nothing could. The caller holds
/// s.build_mutex. May throw what a stack's trim throws.
bool trim_slot(device_slot& s)
{
  if (s.stack) {
    s.stack->trim();
    return true;
  }
  return s.object != nullptr && !s.packages.empty() && s.packages.back()->trim();
}

std::string out_of_memory_message(device_slot& s, int device, std::size_t size, char const* what)
{
  using gpumem::spec::size_to_string;
  std::string msg = "gpumem: CUDA out of memory on device " + std::to_string(device) +
                    " (tried to allocate " + size_to_string(size) + "): " + what +
                    ". PyTorch tensors hold " + size_to_string(s.bytes.current.load()) +
                    " through gpumem";
  if (s.stack) {
    std::lock_guard lock{s.build_mutex};
    msg += "; gpumem holds " + size_to_string(held_bytes(s)) + " from the device";
  }
  return msg + ".";
}

// -- CUDA graphs ----------------------------------------------------------------------------------
//
// PyTorch tells the allocator about a graph capture through three hooks (CUDAPluggableAllocator's
// set_begin_allocate_to_pool, set_end_allocate_to_pool_fn, set_release_pool), called with the
// graph's memory pool id (c10::cuda::MempoolId_t, a pair of unsigned long long):
//   begin(device, id, filter)  before the capture starts: allocations on a stream for which
//                              filter(stream) is true (the streams of this capture) go to the pool;
//   end(device, id)            after the capture: the pool stops taking allocations;
//   release(device, id)        when the graph is reset or destroyed: its memory may go.
// Each pool id gets a private_pool of its own (above; over the device's metered runtime), so
// memory the graph's kernels use stays the graph's until the release, whatever the rest of the
// program allocates; its blocks freed meanwhile go back to it (reused by later allocations on the
// same stream, of the same graph or of graphs sharing the pool), never to the main resource. A
// block of the main resource freed while a capture is under way (on any stream: PyTorch frees a
// block on the stream it was allocated on) is kept aside until the release, as the graph may use
// its address at every replay. The pool grows with cudaMalloc during the capture, in the
// thread's relaxed capture mode (CUDA refuses cudaMalloc in the default, global mode), as PyTorch's
// own allocator does; it is destroyed, giving its memory back, once released and empty.
//
// The hooks are called through plain function pointers with C++ arguments (a std::pair, a
// std::function): the exported functions below have exactly PyTorch's signatures.

std::mutex graph_config_mutex;
std::string graph_hooks_missing =  // empty once gpumem.torch gave PyTorch the hooks
    "the allocator's graph-pool hooks were not given to PyTorch (gpumem.torch.use() gives them)";

/// Puts the calling thread in relaxed stream-capture mode while it lives (only when `on`).
class relaxed_capture_mode {
 public:
  explicit relaxed_capture_mode(bool on) noexcept : on_{on}
  {
    if (on_ && cudaThreadExchangeStreamCaptureMode(&mode_) != cudaSuccess) {
      (void)cudaGetLastError();
      on_ = false;
    }
  }
  ~relaxed_capture_mode()
  {
    if (on_) { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  }
  relaxed_capture_mode(relaxed_capture_mode const&)            = delete;
  relaxed_capture_mode& operator=(relaxed_capture_mode const&) = delete;

 private:
  cudaStreamCaptureMode mode_{cudaStreamCaptureModeRelaxed};
  bool on_;
};

std::string pool_name(pool_id id)
{
  return "(" + std::to_string(id.first) + ", " + std::to_string(id.second) + ")";
}

/// The caller holds s.graph_mutex (as for every function below that takes a slot).
graph_pool* find_pool(device_slot& s, pool_id id) noexcept
{
  for (auto& p : s.graph_pools) {
    if (p->id == id) { return p.get(); }
  }
  return nullptr;
}

/// The pool being allocated to by the capture `stream` belongs to, or nullptr.
graph_pool* pool_for_stream(device_slot& s, cudaStream_t stream)
{
  for (auto& p : s.graph_pools) {
    for (auto& f : p->filters) {
      if (f && f(stream)) { return p.get(); }
    }
  }
  return nullptr;
}

/// Gives the blocks held aside back to the main resource and destroys the pool once no capture
/// uses it and PyTorch holds none of its blocks.
void settle_pool(device_slot& s, graph_pool* pool)
{
  if (pool->uses > 0) { return; }
  bool const goes = pool->live == 0;
  if (pool->held.empty() && !goes) { return; }
  auto it = std::find_if(s.graph_pools.begin(), s.graph_pools.end(),
                         [&](auto const& p) { return p.get() == pool; });
  if (it == s.graph_pools.end()) { return; }
  int const device = static_cast<int>(&s - slots.data());
  int previous     = device;
  if (s.on_cuda) {  // the pool's device current while its memory goes back
    if (cudaGetDevice(&previous) != cudaSuccess) {
      (void)cudaGetLastError();
      previous = device;
    }
    if (previous != device) { (void)cudaSetDevice(device); }
    // The graph's last replay may still run, on any stream: wait for the device before its
    // memory goes anywhere, unless a capture is under way (a synchronization would break it).
    if (s.pools_allocating.load() == 0) { (void)cudaDeviceSynchronize(); }
  }
  auto* main = s.resource.load(std::memory_order_acquire);
  for (auto const& b : pool->held) {
    if (main != nullptr) { main->deallocate(b.ptr, b.bytes, gpumem::cuda_stream_view{b.stream}); }
  }
  pool->held.clear();
  if (goes) {
    s.graph_pools.erase(it);
    s.pools_alive.fetch_sub(1);
  }
  if (s.on_cuda && previous != device) { (void)cudaSetDevice(previous); }
}

/// malloc's path for an allocation on a capturing stream: the pool of its capture (nullptr when
/// no pool is being allocated to from this stream).
void* graph_allocate(device_slot& s, std::size_t n, cudaStream_t stream, bool& routed)
{
  std::lock_guard lock{s.graph_mutex};
  graph_pool* pool = pool_for_stream(s, stream);
  routed           = pool != nullptr;
  if (pool == nullptr) { return nullptr; }
  relaxed_capture_mode relaxed{s.on_cuda};
  void* p = pool->memory->allocate(n, stream);
  if (p != nullptr) {
    s.graph_owner.emplace(p, pool);
    ++pool->live;
  }
  return p;
}

/// free's path while graph pools exist: true when the block was taken care of here (a graph
/// pool's block, or a main block freed during a capture and held aside).
bool graph_free(device_slot& s, void* ptr, std::size_t n, cudaStream_t stream)
{
  std::lock_guard lock{s.graph_mutex};
  if (auto it = s.graph_owner.find(ptr); it != s.graph_owner.end()) {
    graph_pool* pool = it->second;
    s.graph_owner.erase(it);
    pool->memory->deallocate(ptr, stream);
    --pool->live;
    settle_pool(s, pool);
    return true;
  }
  if (s.pools_allocating.load() == 0) { return false; }
  // A main block freed while a capture is under way: the graph may use its address at every
  // replay (PyTorch frees a block on the stream it was allocated on, which need not be the
  // capture's), so it is held by the pool of the capture freeing it, else by a pool being
  // captured into, until that pool is released.
  graph_pool* pool = pool_for_stream(s, stream);
  for (auto it = s.graph_pools.begin(); pool == nullptr && it != s.graph_pools.end(); ++it) {
    if (!(*it)->filters.empty()) { pool = it->get(); }
  }
  if (pool == nullptr) { return false; }
  pool->held.push_back({ptr, n, stream});
  return true;
}

std::string capture_refused_message(int device)
{
  std::string missing;
  {
    std::lock_guard lock{graph_config_mutex};
    missing = graph_hooks_missing;
  }
  std::string const head = "gpumem torch allocator: an allocation on CUDA device " +
                           std::to_string(device) + " from a stream that is capturing a CUDA graph";
  if (!missing.empty()) {
    return head + ", but CUDA graphs are not available: " + missing +
           ". Without them memory the graph uses would be handed to other tensors and "
           "overwritten when the graph replays; capture graphs under PyTorch's own allocator "
           "instead.";
  }
  return head +
         " that PyTorch did not announce (no graph memory pool is being allocated to "
         "from this stream). Capture with torch.cuda.graph / torch.cuda.CUDAGraph (which "
         "tell the allocator), not with cudaStreamBeginCapture directly.";
}

}  // namespace

GPUMEM_TORCH_EXPORT void* gpumem_torch_malloc(ssize_t size, int device, cudaStream_t stream)
{
  auto* s = slot_of(device);
  if (s == nullptr) {
    fail("gpumem torch allocator: CUDA device " + std::to_string(device) +
             " is out of range (at most " + std::to_string(max_devices) + " devices)",
         false);
  }
  auto& r      = resource_of(*s, device);
  auto const n = static_cast<std::size_t>(size);
  bool routed  = false;  // an allocation of a CUDA graph's capture, served by its private pool
  void* p{};
  if (s->pools_allocating.load(std::memory_order_acquire) > 0) {
    try {
      p = graph_allocate(*s, n, stream, routed);
    } catch (std::bad_alloc const& e) {
      s->ooms.fetch_add(1, std::memory_order_relaxed);
      record("allocate failure", nullptr, n, stream);
      fail(out_of_memory_message(*s, device, n, e.what()) +
               " (while allocating to a CUDA graph's private pool)",
           true);
    } catch (std::exception const& e) {
      fail(std::string{"gpumem (CUDA graph pool): "} + e.what(), false);
    }
  }
  if (!routed && s->on_cuda && stream_is_capturing(stream)) {
    fail(capture_refused_message(device), false);
  }
  try {
    try {
      if (!routed) { p = r.allocate(n, gpumem::cuda_stream_view{stream}); }
    } catch (std::bad_alloc const&) {
      {
        std::lock_guard lock{s->build_mutex};
        if (!trim_slot(*s)) { throw; }  // nothing to give back: the first error stands
      }
      s->retries.fetch_add(1, std::memory_order_relaxed);
      p = r.allocate(n, gpumem::cuda_stream_view{stream});
    }
  } catch (std::bad_alloc const& e) {  // gpumem::out_of_memory and bad_alloc
    s->ooms.fetch_add(1, std::memory_order_relaxed);
    record("allocate failure", nullptr, n, stream);
    fail(out_of_memory_message(*s, device, n, e.what()), true);
  } catch (std::exception const& e) {
    std::string_view const what = e.what();
    fail(what.starts_with("gpumem") ? std::string{what} : "gpumem: " + std::string{what}, false);
  }
  if (p != nullptr) {
    s->bytes.add(n);
    s->blocks.add(1);
    if (s->footprint != nullptr) { raise_to(s->footprint_peak, s->footprint->held_bytes()); }
  }
  record_allocate(p, n, stream);
  return p;
}

/// gpumem_torch_malloc that returns nullptr instead of throwing (gpumem_torch_last_error says
/// why): for callers that cannot take a C++ exception (ctypes, C).
GPUMEM_TORCH_EXPORT void* gpumem_torch_try_malloc(ssize_t size, int device, cudaStream_t stream)
{
  try {
    return gpumem_torch_malloc(size, device, stream);
  } catch (std::exception const& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "unknown error";
  }
  return nullptr;
}

GPUMEM_TORCH_EXPORT void gpumem_torch_free(void* ptr, ssize_t size, int device, cudaStream_t stream)
{
  auto* s = slot_of(device);
  if (s == nullptr || ptr == nullptr) { return; }
  auto* r = s->resource.load(std::memory_order_acquire);
  if (r == nullptr) { return; }
  auto const n = static_cast<std::size_t>(size);
  record("free", ptr, n, stream);
  s->bytes.sub(n);
  s->blocks.sub(1);
  if (s->pools_alive.load(std::memory_order_acquire) > 0 && graph_free(*s, ptr, n, stream)) {
    return;
  }
  r->deallocate(ptr, n, gpumem::cuda_stream_view{stream});
}

/// PyTorch's beginAllocateToPool hook: until the matching end, allocations on `device` from a
/// stream for which `filter` is true come from the private pool `id` (created on its first use).
GPUMEM_TORCH_EXPORT void gpumem_torch_begin_allocate_to_pool(int device, pool_id id,
                                                             stream_filter filter)
{
  auto* s = slot_of(device);
  if (s == nullptr) { return; }
  gpumem::runtime* base{};
  {
    std::lock_guard lock{config_mutex};
    base = config_runtime;
  }
  {
    std::lock_guard lock{s->build_mutex};
    if (s->meter) { base = s->meter.get(); }  // the device's own meter: counted as reserved
  }
  std::lock_guard lock{s->graph_mutex};
  graph_pool* pool = find_pool(*s, id);
  if (pool == nullptr) {
    auto fresh   = std::make_unique<graph_pool>();
    fresh->id    = id;
    fresh->meter = std::make_unique<gpumem::trace::metered_runtime>(
        base != nullptr ? *base : gpumem::cuda_device());
    fresh->memory = std::make_unique<private_pool>(*fresh->meter);
    pool          = fresh.get();
    s->graph_pools.push_back(std::move(fresh));
    s->pools_alive.fetch_add(1);
  }
  pool->filters.push_back(std::move(filter));
  ++pool->uses;
  s->pools_allocating.fetch_add(1, std::memory_order_release);
}

/// PyTorch's endAllocateToPool hook: the capture into pool `id` has ended.
GPUMEM_TORCH_EXPORT void gpumem_torch_end_allocate_to_pool(int device, pool_id id)
{
  auto* s = slot_of(device);
  if (s == nullptr) { return; }
  std::lock_guard lock{s->graph_mutex};
  graph_pool* pool = find_pool(*s, id);
  if (pool == nullptr || pool->filters.empty()) { return; }
  pool->filters.erase(pool->filters.begin());
  s->pools_allocating.fetch_sub(1, std::memory_order_release);
}

/// PyTorch's releasePool hook: a graph captured into pool `id` was reset or destroyed. The pool
/// goes once every capture into it was released and PyTorch holds none of its blocks.
GPUMEM_TORCH_EXPORT void gpumem_torch_release_pool(int device, pool_id id)
{
  auto* s = slot_of(device);
  if (s == nullptr) { return; }
  std::lock_guard lock{s->graph_mutex};
  graph_pool* pool = find_pool(*s, id);
  if (pool == nullptr) { return; }
  if (pool->uses > 0) { --pool->uses; }
  try {
    settle_pool(*s, pool);
  } catch (...) {  // called from a destructor in PyTorch: never throw
  }
}

/// Tells the library whether PyTorch took the graph-pool hooks: `missing` empty when it did,
/// else what is missing (said when a capture allocates).
GPUMEM_TORCH_EXPORT void gpumem_torch_set_graph_support(char const* missing)
{
  std::lock_guard lock{graph_config_mutex};
  graph_hooks_missing = missing != nullptr ? missing : "";
}

/// The graph pools of `device`: writes up to n (id.first, id.second, captures not released,
/// blocks PyTorch holds, blocks held aside, bytes the pool holds from the device) sextuples;
/// returns how many pools exist (-1 for a device out of range).
GPUMEM_TORCH_EXPORT int gpumem_torch_graph_pools(int device, u64* out, int n)
{
  auto* s = slot_of(device);
  if (s == nullptr) { return -1; }
  std::lock_guard lock{s->graph_mutex};
  int i = 0;
  for (auto const& p : s->graph_pools) {
    if (i < n && out != nullptr) {
      u64* row = out + 6 * static_cast<std::ptrdiff_t>(i);
      row[0]   = p->id.first;
      row[1]   = p->id.second;
      row[2]   = static_cast<u64>(p->uses);
      row[3]   = p->live;
      row[4]   = p->held.size();
      row[5]   = p->meter->held_bytes();
    }
    ++i;
  }
  return i;
}

/// For tests without a GPU: begin_allocate_to_pool with a filter that is true for `stream` only.
GPUMEM_TORCH_EXPORT int gpumem_torch_test_begin_pool(int device, u64 first, u64 second,
                                                     void* stream)
{
  try {
    auto* const match = static_cast<cudaStream_t>(stream);
    gpumem_torch_begin_allocate_to_pool(device, pool_id{first, second},
                                        [match](cudaStream_t s) { return s == match; });
    return 0;
  } catch (std::exception const& e) {
    last_error = e.what();
    return -1;
  }
}

GPUMEM_TORCH_EXPORT void gpumem_torch_empty_cache(void)
{
  for (auto& s : slots) {
    if (s.resource.load(std::memory_order_acquire) == nullptr) { continue; }
    std::lock_guard lock{s.build_mutex};
    try {
      (void)trim_slot(s);
    } catch (...) {  // a failed trim leaves the memory where it was; never throw into PyTorch
    }
  }
}

GPUMEM_TORCH_EXPORT char const* gpumem_torch_last_error(void)
{
  return last_error.c_str();
}

/// Sets the spec of `device` (-1: the default of every device without its own), built over
/// `runtime` (nullptr: CUDA; `simulated`: a host stand-in without memory) on the device's first
/// allocation. Returns 0; -1 for a device out of range; -2 when the device's resource already
/// exists; -3 when the spec does not parse (gpumem_torch_last_error says why).
GPUMEM_TORCH_EXPORT int gpumem_torch_configure(int device, char const* spec, void* runtime,
                                               int simulated)
{
  std::string const text = spec != nullptr ? spec : "";
  try {
    if (!text.empty()) { (void)gpumem::spec::parse_resource_spec(text); }
  } catch (std::exception const& e) {
    last_error = e.what();
    return -3;
  }
  std::lock_guard lock{config_mutex};
  config_runtime   = static_cast<gpumem::runtime*>(runtime);
  config_simulated = simulated != 0;
  if (device == -1) {
    default_spec = text;
    every_device = !text.empty();
    return 0;
  }
  auto* s = slot_of(device);
  if (s == nullptr) {
    last_error = "device " + std::to_string(device) + " is out of range";
    return -1;
  }
  std::lock_guard slot_lock{s->build_mutex};
  if (s->resource.load() != nullptr) {
    last_error = "device " + std::to_string(device) + " already has its resource";
    return -2;
  }
  s->spec = text;
  return 0;
}

/// Sets a resource object for `device` (-1: every device). `on_cuda`: the resource allocates CUDA
/// memory (then allocations on a capturing stream are refused); 0 for a test's host stand-in.
GPUMEM_TORCH_EXPORT int gpumem_torch_set_resource2(int device, void* resource, int on_cuda)
{
  if (device == -1) {
    for (int d = 0; d < max_devices; ++d) { gpumem_torch_set_resource2(d, resource, on_cuda); }
    return 0;
  }
  auto* s = slot_of(device);
  if (s == nullptr) { return -1; }
  auto const allocate   = package_allocate.load();
  auto const deallocate = package_deallocate.load();
  if (resource != nullptr && (allocate == nullptr || deallocate == nullptr)) {
    last_error =
        "gpumem torch allocator: a resource object was given before the gpumem package "
        "registered how to call it (gpumem_torch_set_resource_calls)";
    return -3;
  }
  std::lock_guard lock{s->build_mutex};
  device_memory_resource* r = nullptr;
  if (resource != nullptr) {
    s->packages.push_back(
        std::make_unique<package_resource>(resource, allocate, deallocate, package_trim.load()));
    r = s->packages.back().get();
  }
  s->object  = resource;
  s->on_cuda = r != nullptr && on_cuda != 0;
  s->resource.store(r);
  return 0;
}

GPUMEM_TORCH_EXPORT int gpumem_torch_set_resource(int device, void* resource)
{
  return gpumem_torch_set_resource2(device, resource, 0);
}

/// How resource objects of the Python package are called (see package_resource); the package
/// registers its two functions once, before setting any resource object.
GPUMEM_TORCH_EXPORT void gpumem_torch_set_resource_calls(void* allocate, void* deallocate,
                                                         void* trim)
{
  package_allocate.store(reinterpret_cast<allocate_call>(allocate));
  package_deallocate.store(reinterpret_cast<deallocate_call>(deallocate));
  package_trim.store(reinterpret_cast<trim_call>(trim));
}

/// The resource object set for `device` (the package's object), or the stack built from a spec.
GPUMEM_TORCH_EXPORT void* gpumem_torch_get_resource(int device)
{
  auto* s = slot_of(device);
  if (s == nullptr) { return nullptr; }
  std::lock_guard lock{s->build_mutex};
  return s->object != nullptr ? s->object : s->resource.load();
}

/// Forgets the device's resource and destroys the stack built from a spec, with its statistics,
/// so that the next allocation builds it again. Only while PyTorch holds nothing on the device:
/// returns -2 (and keeps everything) otherwise; -1 for a device out of range.
GPUMEM_TORCH_EXPORT int gpumem_torch_release(int device)
{
  auto* s = slot_of(device);
  if (s == nullptr) { return -1; }
  std::lock_guard lock{s->build_mutex};
  if (s->blocks.current.load() != 0 || s->pools_alive.load() != 0) { return -2; }
  s->resource.store(nullptr);
  s->object    = nullptr;
  s->footprint = nullptr;
  s->on_cuda   = false;
  s->stack.reset();
  s->observer.reset();
  s->meter.reset();
  for (auto* st : {&s->bytes, &s->blocks}) {
    st->current.store(0);
    st->peak.store(0);
    st->reset_accumulated();
  }
  s->footprint_peak.store(0);
  s->retries.store(0);
  s->ooms.store(0);
  return 0;
}

/// The statistics of `device`, in this order (n of them written; returns how many exist, -1
/// for a device out of range):
///   0-3   bytes PyTorch holds: current, peak, allocated, freed
///   4-7   blocks PyTorch holds: current, peak, allocated, freed
///   8-11  bytes held from the device: current, peak, allocated, freed
///   12-13 device allocations, device frees
///   14    allocation retries, 15 out-of-memory errors
///   16    1 when the resource exists, 17 1 when the bytes held from the device are measured
GPUMEM_TORCH_EXPORT int gpumem_torch_stats(int device, u64* out, int n)
{
  constexpr int count = 18;
  auto* s             = slot_of(device);
  if (s == nullptr) { return -1; }
  std::array<u64, count> v{};
  v[0] = s->bytes.current;
  v[1] = s->bytes.peak;
  v[2] = s->bytes.allocated;
  v[3] = s->bytes.freed;
  v[4] = s->blocks.current;
  v[5] = s->blocks.peak;
  v[6] = s->blocks.allocated;
  v[7] = s->blocks.freed;
  {
    std::lock_guard lock{s->build_mutex};
    v[16] = s->resource.load() != nullptr ? 1 : 0;
    if (s->stack) {
      v[17] = 1;
      v[8]  = held_bytes(*s);
      v[9]  = s->footprint != nullptr ? std::max<u64>(s->footprint_peak.load(), v[8])
                                      : s->meter->peak_held_bytes();
      v[10] = s->observer->chunks_bytes.allocated;
      v[11] = s->observer->chunks_bytes.freed;
      v[12] = s->observer->device_allocs;
      v[13] = s->observer->device_frees;
    }
  }
  v[14] = s->retries;
  v[15] = s->ooms;
  std::copy_n(v.begin(), std::clamp(n, 0, count), out);
  return count;
}

GPUMEM_TORCH_EXPORT void gpumem_torch_reset_peak(int device)
{
  auto* s = slot_of(device);
  if (s == nullptr) { return; }
  s->bytes.reset_peak();
  s->blocks.reset_peak();
  std::lock_guard lock{s->build_mutex};
  if (s->stack) {
    s->meter->reset_peak();
    s->footprint_peak.store(held_bytes(*s));
  }
}

GPUMEM_TORCH_EXPORT void gpumem_torch_reset_accumulated(int device)
{
  auto* s = slot_of(device);
  if (s == nullptr) { return; }
  s->bytes.reset_accumulated();
  s->blocks.reset_accumulated();
  s->retries.store(0);
  s->ooms.store(0);
  std::lock_guard lock{s->build_mutex};
  if (s->observer) {
    s->observer->chunks_bytes.reset_accumulated();
    s->observer->device_allocs.store(0);
    s->observer->device_frees.store(0);
  }
}

/// Starts writing every allocation and free (all devices) to `path` as a gpumem trace (the CSV
/// `gpumem replay` reads). With `frames` (not null), the trace has the Frames column and each
/// allocate row carries what `frames(buf, cap)` wrote into buf (at most cap bytes; it returns
/// the length): the allocating call stack, innermost first, frames joined by '|'. It is called
/// from the allocating thread, with no lock of this library held. Returns 0; -1 when a recording
/// is running or the file cannot be opened (gpumem_torch_last_error says which).
GPUMEM_TORCH_EXPORT int gpumem_torch_record_start2(char const* path, frames_fn frames)
{
  std::lock_guard lock{record_mutex};
  if (recorder) {
    last_error = "a recording is already running";
    return -1;
  }
  try {
    auto file = std::make_shared<std::ofstream>(path, std::ios::out | std::ios::trunc);
    if (!*file) {
      last_error = std::string{"cannot open "} + path + " for writing";
      return -1;
    }
    recorder = std::make_unique<gpumem::detail::allocation_logger>(
        std::vector<std::shared_ptr<std::ostream>>{file}, false, frames != nullptr);
  } catch (std::exception const& e) {
    last_error = e.what();
    return -1;
  }
  record_frames.store(frames, std::memory_order_release);
  recording.store(true);
  return 0;
}

/// gpumem_torch_record_start2 without frames.
GPUMEM_TORCH_EXPORT int gpumem_torch_record_start(char const* path)
{
  return gpumem_torch_record_start2(path, nullptr);
}

/// Stops the recording and closes its file. Returns 0; -1 when the file could not be written
/// completely (a full disk) or no recording was running.
GPUMEM_TORCH_EXPORT int gpumem_torch_record_stop(void)
{
  recording.store(false);
  record_frames.store(nullptr, std::memory_order_release);
  std::lock_guard lock{record_mutex};
  if (!recorder) {
    last_error = "no recording is running";
    return -1;
  }
  int rc = 0;
  try {
    recorder->flush();
  } catch (std::exception const& e) {
    last_error = e.what();
    rc         = -1;
  }
  recorder.reset();
  return rc;
}

GPUMEM_TORCH_EXPORT int gpumem_torch_has_c10(void)
{
#ifdef GPUMEM_WITH_C10
  return 1;
#else
  return 0;
#endif
}
