// python/src/torch_allocator/mem_pools.cpp — the segments of PyTorch memory pools
// (torch.cuda.MemPool) from gpumem stacks: what gpumem.torch.mem_pool(spec) plugs in.
//
// Inside a MemPool, PyTorch's own caching allocator places the tensors; it asks the pool's
// allocator only for segments (large, rounded sizes) and gives them back at empty_cache or when
// the pool goes. A CUDAPluggableAllocator names one allocate and one free function, and PyTorch
// does not say which pool a call is for, so this library exports a fixed number of function
// pairs, one per pool slot:
//
//   void* gpumem_torch_pool_malloc_<k>(ssize_t size, int device, cudaStream_t stream);
//   void  gpumem_torch_pool_free_<k>(void* ptr, ssize_t size, int device, cudaStream_t stream);
//
// for k < gpumem_torch_pool_slots(), and gpumem.torch.mem_pool takes a free slot for each pool:
//
//   int   gpumem_torch_pool_slots(void);
//   int   gpumem_torch_pool_open(char const* spec, void* runtime, int simulated);  // slot or -1
//   int   gpumem_torch_pool_close(int slot);        // -2 while a segment is out
//   int   gpumem_torch_pool_stats(int slot, unsigned long long* out, int n);
//   char const* gpumem_torch_pool_last_error(void);
//   int   gpumem_torch_pool_trim(int slot);          // free memory back to the devices
//
// A paged slot (gpumem_torch_pool_open_paged) gives PyTorch segments of address space only and
// backs their pages while PyTorch's blocks live in them: PyTorch reports every allocation and free
// through its allocator trace, which gpumem.torch's small extension forwards here:
//
//   int   gpumem_torch_pool_open_paged(double slack, void* runtime, int simulated);
//   int   gpumem_torch_pages_event(int action, int device, unsigned long long addr,
//                                  unsigned long long size, void* stream);  // 0, or -1
//   int   gpumem_torch_pool_paged_stats(int slot, unsigned long long* out, int n);
//
// and, for gpumem.torch.nccl_registration, registrations with NCCL that follow the memory of a
// slot's vmm_pool on one device (gpumem::mr::vmm_registrar over NCCL's C functions):
//
//   int gpumem_torch_pool_register(int slot, int device, void* comm, void* register_fn,
//                                  void* deregister_fn, char const* unit);  // id or -1
//   int gpumem_torch_pool_deregister(int slot, int id);                      // 0, or -1 unknown
//   int gpumem_torch_pool_registration_stats(int slot, int id, unsigned long long* out, int n);
//   char const* gpumem_torch_pool_registration_failure(int slot, int id);
//
// A slot's registrations are closed (everything deregistered) before its stacks go.
//
// A slot holds its spec and, per device, a stack built from it on the first segment asked for on
// that device, over a metered runtime (what the stack holds from the device). The functions never
// throw into PyTorch: a failed allocation returns nullptr, which PyTorch treats as out of memory
// (it frees its cached segments of the pool and asks again before raising), with the reason in
// gpumem_torch_pool_last_error. Invariant per slot: segments == allocations - frees of this slot.
#include <gpumem/detail/runtime.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/paged_segments.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>
#include <gpumem/mr/vmm_registrar.hpp>
#include <gpumem/spec/resource_factory.hpp>
#include <gpumem/spec/resource_spec.hpp>
#include <gpumem/runtime/metered_runtime.hpp>

#include <cuda_runtime_api.h>
#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "../nccl_registrar.hpp"

#define GPUMEM_TORCH_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using u64 = unsigned long long;

constexpr int pool_slots       = 16;
constexpr int pool_max_devices = 64;

/// One device's stack of a pool slot, built on first use (or, for a paged slot, its segments).
struct pool_device {
  std::unique_ptr<gpumem::trace::metered_runtime> meter;
  std::unique_ptr<gpumem::spec::resource_stack> stack;
  std::unique_ptr<gpumem::mr::paged_segments> pages;
};

/// A registration that follows one device's stack of a slot.
struct pool_registration {
  int id{};
  std::unique_ptr<gpumem::mr::vmm_registrar> registrar;
};

struct pool_slot {
  std::mutex mutex;  // guards everything but the counters
  bool open{};
  std::vector<pool_registration> registrations;  // closed before the stacks go
  int next_registration{};
  std::string spec;
  gpumem::detail::runtime* runtime{};  // a test's host stand-in; nullptr: CUDA
  bool simulated{};
  double paged_slack{-1};  // >= 0: a paged slot (segments backed page by page, see below)
  std::array<pool_device, pool_max_devices> devices;
  std::atomic<u64> segments{}, segment_bytes{}, allocations{}, failures{};
};

/// Writes the first n (at most all) of `v` to `out` (none when it is null); returns how many.
template <std::size_t N>
int copy_out(std::array<u64, N> const& v, u64* out, int n) noexcept
{
  int const count = n < static_cast<int>(N) ? n : static_cast<int>(N);
  for (int i = 0; i < count && out != nullptr; ++i) { out[i] = v[static_cast<std::size_t>(i)]; }
  return count;
}

// Never destroyed: PyTorch may give segments back during interpreter shutdown.
auto& pool_table = *new std::array<pool_slot, pool_slots>;
thread_local std::string pool_error;

// The paged segments of every open paged slot, for gpumem_torch_pages_event (which PyTorch calls
// for every allocation and free of the process): read under a shared lock, changed under the
// unique one (a device's segments are added when built, removed before they go).
auto& paged_lock = *new std::shared_mutex;
auto& paged_live = *new std::vector<gpumem::mr::paged_segments*>;
std::atomic<int> paged_count{0};

/// The paged slot's segments on `device`, built on first use; the caller holds slot.mutex.
gpumem::mr::paged_segments& pages_on(pool_slot& slot, int device)
{
  auto& d = slot.devices.at(static_cast<std::size_t>(device));
  if (d.pages) { return *d.pages; }
  auto& rt = slot.runtime != nullptr ? *slot.runtime : gpumem::detail::cuda_runtime();
  auto p   = std::make_unique<gpumem::mr::paged_segments>(
      gpumem::mr::paged_segments_options{.device = device, .slack = slot.paged_slack}, rt);
  std::unique_lock lock{paged_lock};
  paged_live.push_back(p.get());
  paged_count.store(static_cast<int>(paged_live.size()));
  d.pages = std::move(p);
  return *d.pages;
}

/// Drops a device's paged segments (their memory goes back); the caller holds slot.mutex.
void drop_pages(pool_device& d) noexcept
{
  if (!d.pages) { return; }
  {
    std::unique_lock lock{paged_lock};
    std::erase(paged_live, d.pages.get());
    paged_count.store(static_cast<int>(paged_live.size()));
  }
  d.pages.reset();
}

/// The slot's stack on `device`, built on first use; the caller holds slot.mutex.
gpumem::mr::device_memory_resource& stack_on(pool_slot& slot, int device)
{
  auto& d = slot.devices.at(static_cast<std::size_t>(device));
  if (d.stack) { return d.stack->top(); }
  auto& inner        = slot.runtime != nullptr ? *slot.runtime : gpumem::detail::cuda_runtime();
  int const previous = inner.current_device();
  if (previous != device) { inner.set_device(device); }
  try {
    auto meter = std::make_unique<gpumem::trace::metered_runtime>(inner);
    auto stack = std::make_unique<gpumem::spec::resource_stack>(
        gpumem::spec::build(slot.spec, *meter, slot.simulated));
    d.meter = std::move(meter);
    d.stack = std::move(stack);
  } catch (...) {
    if (previous != device) { inner.set_device(previous); }
    throw;
  }
  if (previous != device) { inner.set_device(previous); }
  return d.stack->top();
}

void* pool_malloc(int k, ssize_t size, int device, cudaStream_t stream) noexcept
{
  auto& slot = pool_table[static_cast<std::size_t>(k)];
  try {
    if (device < 0 || device >= pool_max_devices) {
      throw gpumem::logic_error{"CUDA device " + std::to_string(device) + " is out of range"};
    }
    gpumem::mr::device_memory_resource* r{};
    gpumem::mr::paged_segments* pages{};
    {
      std::lock_guard lock{slot.mutex};
      if (!slot.open) { throw gpumem::logic_error{"the memory pool was closed"}; }
      if (slot.paged_slack >= 0) {
        pages = &pages_on(slot, device);
      } else {
        r = &stack_on(slot, device);
      }
    }
    auto const n = static_cast<std::size_t>(size);
    void* p      = pages != nullptr ? pages->reserve_segment(n)
                                    : r->allocate(n, gpumem::cuda_stream_view{stream});
    slot.segments.fetch_add(1);
    slot.segment_bytes.fetch_add(n);
    slot.allocations.fetch_add(1);
    return p;
  } catch (std::exception const& e) {
    pool_error = "gpumem memory pool " + std::to_string(k) + ": cannot allocate a segment of " +
                 std::to_string(size) + " bytes on CUDA device " + std::to_string(device) + ": " +
                 e.what();
  } catch (...) {
    pool_error = "gpumem memory pool " + std::to_string(k) + ": unknown error";
  }
  slot.failures.fetch_add(1);
  return nullptr;
}

void pool_free(int k, void* ptr, ssize_t size, int device, cudaStream_t stream) noexcept
{
  if (ptr == nullptr || device < 0 || device >= pool_max_devices) { return; }
  auto& slot = pool_table[static_cast<std::size_t>(k)];
  gpumem::mr::device_memory_resource* r{};
  {
    std::lock_guard lock{slot.mutex};
    auto& d = slot.devices[static_cast<std::size_t>(device)];
    if (d.pages) {
      d.pages->release_segment(ptr, static_cast<std::size_t>(size));
    } else if (!d.stack) {
      return;  // not ours: nothing was allocated on this device
    } else {
      r = &d.stack->top();
    }
  }
  if (r != nullptr) {
    r->deallocate(ptr, static_cast<std::size_t>(size), gpumem::cuda_stream_view{stream});
  }
  slot.segments.fetch_sub(1);
  slot.segment_bytes.fetch_sub(static_cast<std::size_t>(size));
}

}  // namespace

// One exported pair per slot.
#define GPUMEM_POOL_SLOT(k)                                                                \
  GPUMEM_TORCH_EXPORT void* gpumem_torch_pool_malloc_##k(ssize_t size, int device,         \
                                                         cudaStream_t stream)              \
  {                                                                                        \
    return pool_malloc(k, size, device, stream);                                           \
  }                                                                                        \
  GPUMEM_TORCH_EXPORT void gpumem_torch_pool_free_##k(void* ptr, ssize_t size, int device, \
                                                      cudaStream_t stream)                 \
  {                                                                                        \
    pool_free(k, ptr, size, device, stream);                                               \
  }
GPUMEM_POOL_SLOT(0)
GPUMEM_POOL_SLOT(1)
GPUMEM_POOL_SLOT(2)
GPUMEM_POOL_SLOT(3)
GPUMEM_POOL_SLOT(4)
GPUMEM_POOL_SLOT(5)
GPUMEM_POOL_SLOT(6)
GPUMEM_POOL_SLOT(7)
GPUMEM_POOL_SLOT(8)
GPUMEM_POOL_SLOT(9)
GPUMEM_POOL_SLOT(10)
GPUMEM_POOL_SLOT(11)
GPUMEM_POOL_SLOT(12)
GPUMEM_POOL_SLOT(13)
GPUMEM_POOL_SLOT(14)
GPUMEM_POOL_SLOT(15)
#undef GPUMEM_POOL_SLOT
static_assert(pool_slots == 16, "one GPUMEM_POOL_SLOT line per slot");

GPUMEM_TORCH_EXPORT int gpumem_torch_pool_slots(void)
{
  return pool_slots;
}

namespace {

/// Takes a free slot (-1 with the reason in gpumem_torch_pool_last_error when every one is taken).
int open_slot(std::string const& spec, void* runtime, int simulated, double paged_slack)
{
  for (int k = 0; k < pool_slots; ++k) {
    auto& slot = pool_table[static_cast<std::size_t>(k)];
    std::lock_guard lock{slot.mutex};
    if (slot.open || slot.segments.load() != 0) { continue; }
    slot.open        = true;
    slot.spec        = spec;
    slot.runtime     = static_cast<gpumem::detail::runtime*>(runtime);
    slot.simulated   = simulated != 0;
    slot.paged_slack = paged_slack;
    for (auto& d : slot.devices) {
      d.stack.reset();
      d.meter.reset();
      drop_pages(d);
    }
    slot.allocations.store(0);
    slot.failures.store(0);
    return k;
  }
  pool_error = "every one of the " + std::to_string(pool_slots) +
               " gpumem memory pool slots is in use; close a pool (gpumem.torch.MemPool.close) "
               "whose segments PyTorch gave back";
  return -1;
}

}  // namespace

/// Takes a free slot for a pool whose segments come from `spec` (checked here: -1 with the
/// reason in gpumem_torch_pool_last_error for a bad spec, or when every slot is taken).
GPUMEM_TORCH_EXPORT int gpumem_torch_pool_open(char const* spec, void* runtime, int simulated)
{
  std::string const text = spec != nullptr ? spec : "";
  try {
    (void)gpumem::spec::parse_resource_spec(text);
  } catch (std::exception const& e) {
    pool_error = e.what();
    return -1;
  }
  return open_slot(text, runtime, simulated, -1);
}

/// Takes a free slot for a paged pool: its segments are address space (gpumem::mr::paged_segments,
/// one per device), whose pages gpumem_torch_pages_event backs while PyTorch's blocks live in
/// them; free pages beyond `slack` × the peak of live pages move. -1 for a bad slack (reason in
/// gpumem_torch_pool_last_error) or when every slot is taken.
GPUMEM_TORCH_EXPORT int gpumem_torch_pool_open_paged(double slack, void* runtime, int simulated)
{
  if (!(slack >= 0 && slack <= 1e6)) {
    pool_error = "slack " + std::to_string(slack) +
                 " must be a fraction of at least 0 (0.02: 2 % of the peak of live pages)";
    return -1;
  }
  return open_slot("paged:slack=" + std::to_string(slack), runtime, simulated, slack);
}

/// What PyTorch's allocator trace says to paged pools: `action` 0 for an allocation (a block of
/// `size` bytes at `addr` on `device`, used on `stream`: its pages are backed before PyTorch
/// hands it out), 1 for a free completed (its pages may become free). Blocks outside every paged
/// pool are ignored. Returns 0, or -1 when the pages could not be backed (the reason in
/// gpumem_torch_pool_last_error; the block must not be used).
GPUMEM_TORCH_EXPORT int gpumem_torch_pages_event(int action, int device, u64 addr, u64 size,
                                                 void* stream)
{
  if (paged_count.load(std::memory_order_relaxed) == 0) { return 0; }
  auto const* ptr = reinterpret_cast<void const*>(static_cast<std::uintptr_t>(addr));
  auto const s    = static_cast<cudaStream_t>(stream);
  // PyTorch's trace gives the size asked for; its block is that rounded up to 512 bytes, and a
  // kernel may touch the whole block: back (and free) the block's bytes.
  constexpr u64 block_round = 512;
  size = size > ~u64{0} - block_round ? size : (size + block_round - 1) / block_round * block_round;
  std::shared_lock lock{paged_lock};
  for (auto* p : paged_live) {
    if (p->device() != device || !p->owns(ptr)) { continue; }
    if (action == 1) {
      p->unback(ptr, size, s);
      return 0;
    }
    try {
      p->back(ptr, size, s);
      return 0;
    } catch (std::exception const& e) {
      pool_error = std::string{"gpumem paged memory pool: cannot back a block of "} +
                   std::to_string(size) + " bytes on CUDA device " + std::to_string(device) + ": " +
                   e.what();
      return -1;
    }
  }
  return 0;
}

/// Up to n of a paged slot's figures, summed over its devices: bytes backed, pages live now, the
/// most live at once, free pages, handles created, pages moved, moves that waited, handles
/// released, bytes per page, microseconds spent backing and freeing pages (host time, driver
/// calls and waits included). Returns how many were written; -1 out of range or not paged.
GPUMEM_TORCH_EXPORT int gpumem_torch_pool_paged_stats(int k, u64* out, int n)
{
  if (k < 0 || k >= pool_slots) { return -1; }
  auto& slot = pool_table[static_cast<std::size_t>(k)];
  std::lock_guard lock{slot.mutex};
  if (slot.paged_slack < 0) { return -1; }
  std::array<u64, 11> v{};
  for (auto const& d : slot.devices) {
    if (!d.pages) { continue; }
    auto const st = d.pages->stats();
    v[0] += st.backed_bytes;
    v[1] += st.live_pages;
    v[2] += st.peak_live_pages;
    v[3] += st.free_pages;
    v[4] += st.created;
    v[5] += st.moved;
    v[6] += st.waited;
    v[7] += st.released;
    v[8] = st.granularity;
    v[9] += static_cast<u64>(st.back_seconds * 1e6);
    v[10] += static_cast<u64>(st.unback_seconds * 1e6);
  }
  return copy_out(v, out, n);
}

/// Frees slot `k` for another pool: its stacks go. -2 (nothing changes) while PyTorch still holds
/// a segment of it; -1 for a slot out of range.
GPUMEM_TORCH_EXPORT int gpumem_torch_pool_close(int k)
{
  if (k < 0 || k >= pool_slots) { return -1; }
  auto& slot = pool_table[static_cast<std::size_t>(k)];
  std::lock_guard lock{slot.mutex};
  if (slot.segments.load() != 0) { return -2; }
  slot.registrations.clear();  // each deregisters everything, before its pool goes
  for (auto& d : slot.devices) {
    d.stack.reset();
    d.meter.reset();
    drop_pages(d);
  }
  slot.open = false;
  slot.spec.clear();
  return 0;
}

/// Up to n of: segments out, their bytes, segments allocated, failed allocations, bytes the
/// stacks hold from the devices (all devices). Returns how many were written, -1 out of range.
GPUMEM_TORCH_EXPORT int gpumem_torch_pool_stats(int k, u64* out, int n)
{
  if (k < 0 || k >= pool_slots) { return -1; }
  auto& slot = pool_table[static_cast<std::size_t>(k)];
  u64 held   = 0;
  {
    std::lock_guard lock{slot.mutex};
    for (auto const& d : slot.devices) {
      if (d.meter) { held += d.meter->held_bytes(); }
      if (d.pages) { held += d.pages->stats().backed_bytes; }
    }
  }
  std::array<u64, 5> const v{slot.segments.load(), slot.segment_bytes.load(),
                             slot.allocations.load(), slot.failures.load(), held};
  return copy_out(v, out, n);
}

/// Gives the free memory of slot k's stacks back to their devices (resource_stack::trim: what
/// PyTorch gave back with empty_cache, and no more). 0, or -1 for a slot out of range.
GPUMEM_TORCH_EXPORT int gpumem_torch_pool_trim(int k)
{
  if (k < 0 || k >= pool_slots) { return -1; }
  auto& slot = pool_table[static_cast<std::size_t>(k)];
  std::lock_guard lock{slot.mutex};
  for (auto& d : slot.devices) {
    if (d.stack) { d.stack->trim(); }
    if (d.pages) { static_cast<void>(d.pages->trim()); }
  }
  return 0;
}

GPUMEM_TORCH_EXPORT char const* gpumem_torch_pool_last_error(void)
{
  return pool_error.c_str();
}

namespace {

/// Slot k's registration `id`, or nullptr; the caller holds the slot's mutex.
gpumem::mr::vmm_registrar* find_registration(pool_slot& slot, int id)
{
  for (auto& r : slot.registrations) {
    if (r.id == id) { return r.registrar.get(); }
  }
  return nullptr;
}

thread_local std::string registration_failure;

}  // namespace

/// Registers with NCCL what slot k's stack on `device` maps (built now if it is not yet; its leaf
/// must be a vmm_pool) and follows it. Returns an id, or -1 with the reason in
/// gpumem_torch_pool_last_error.
GPUMEM_TORCH_EXPORT int gpumem_torch_pool_register(int k, int device, void* comm, void* register_fn,
                                                   void* deregister_fn, char const* unit)
{
  try {
    if (k < 0 || k >= pool_slots) { throw gpumem::logic_error{"no such memory pool slot"}; }
    if (device < 0 || device >= pool_max_devices) {
      throw gpumem::logic_error{"CUDA device " + std::to_string(device) + " is out of range"};
    }
    auto& slot = pool_table[static_cast<std::size_t>(k)];
    std::lock_guard lock{slot.mutex};
    if (!slot.open) { throw gpumem::logic_error{"the memory pool was closed"}; }
    if (slot.paged_slack >= 0) {
      throw gpumem::logic_error{
          "a paged memory pool moves its pages, so NCCL cannot keep them "
          "registered; register a plain gpumem.torch.mem_pool() instead"};
    }
    (void)stack_on(slot, device);
    auto* pool = dynamic_cast<gpumem::mr::vmm_pool_memory_resource*>(
        &slot.devices[static_cast<std::size_t>(device)].stack->leaf());
    if (pool == nullptr) {
      throw gpumem::logic_error{"its spec '" + slot.spec +
                                "' does not take memory from a vmm_pool; registrations can "
                                "follow only a vmm_pool's memory (e.g. 'vmm_pool:shareable=1')"};
    }
    auto registrar = gpumem::python::make_nccl_registrar(
        *pool, comm, reinterpret_cast<gpumem::python::nccl_register_fn>(register_fn),
        reinterpret_cast<gpumem::python::nccl_deregister_fn>(deregister_fn),
        gpumem::python::registration_unit(unit != nullptr ? unit : ""));
    int const id = slot.next_registration++;
    slot.registrations.push_back({id, std::move(registrar)});
    return id;
  } catch (std::exception const& e) {
    pool_error = "gpumem memory pool " + std::to_string(k) + ": cannot register device " +
                 std::to_string(device) + "'s memory: " + e.what();
  }
  return -1;
}

/// Closes registration `id` of slot k (everything deregistered). 0, or -1 when unknown.
GPUMEM_TORCH_EXPORT int gpumem_torch_pool_deregister(int k, int id)
{
  if (k < 0 || k >= pool_slots) { return -1; }
  auto& slot = pool_table[static_cast<std::size_t>(k)];
  std::lock_guard lock{slot.mutex};
  for (auto it = slot.registrations.begin(); it != slot.registrations.end(); ++it) {
    if (it->id == id) {
      slot.registrations.erase(it);
      return 0;
    }
  }
  return -1;
}

/// Up to n of: registrations now, their bytes, register calls, deregister calls, failures.
/// Returns how many were written; -1 for an unknown registration.
GPUMEM_TORCH_EXPORT int gpumem_torch_pool_registration_stats(int k, int id, u64* out, int n)
{
  if (k < 0 || k >= pool_slots) { return -1; }
  auto& slot = pool_table[static_cast<std::size_t>(k)];
  std::lock_guard lock{slot.mutex};
  auto const* r = find_registration(slot, id);
  if (r == nullptr) { return -1; }
  u64 count{}, bytes{};
  for (auto const& x : r->registrations()) {
    ++count;
    bytes += x.bytes;
  }
  std::array<u64, 5> const v{count, bytes, r->registered(), r->deregistered(), r->failures()};
  return copy_out(v, out, n);
}

/// What the last failing NCCL call of registration `id` reported ("" when none failed).
GPUMEM_TORCH_EXPORT char const* gpumem_torch_pool_registration_failure(int k, int id)
{
  registration_failure.clear();
  if (k < 0 || k >= pool_slots) { return registration_failure.c_str(); }
  auto& slot = pool_table[static_cast<std::size_t>(k)];
  std::lock_guard lock{slot.mutex};
  if (auto const* r = find_registration(slot, id)) { registration_failure = r->last_failure(); }
  return registration_failure.c_str();
}
