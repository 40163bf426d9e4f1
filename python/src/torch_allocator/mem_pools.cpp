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
#include <gpumem/mr/vmm_pool_memory_resource.hpp>
#include <gpumem/mr/vmm_registrar.hpp>
#include <gpumem/spec/resource_factory.hpp>
#include <gpumem/spec/resource_spec.hpp>
#include <gpumem/runtime/metered_runtime.hpp>

#include <cuda_runtime_api.h>
#include <sys/types.h>

#include <array>
#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "../nccl_registrar.hpp"

#define GPUMEM_TORCH_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using u64 = unsigned long long;

constexpr int pool_slots       = 16;
constexpr int pool_max_devices = 64;

/// One device's stack of a pool slot, built on first use.
struct pool_device {
  std::unique_ptr<gpumem::trace::metered_runtime> meter;
  std::unique_ptr<gpumem::spec::resource_stack> stack;
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
  std::array<pool_device, pool_max_devices> devices;
  std::atomic<u64> segments{}, segment_bytes{}, allocations{}, failures{};
};

// Never destroyed: PyTorch may give segments back during interpreter shutdown.
auto& pool_table = *new std::array<pool_slot, pool_slots>;
thread_local std::string pool_error;

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
    {
      std::lock_guard lock{slot.mutex};
      if (!slot.open) { throw gpumem::logic_error{"the memory pool was closed"}; }
      r = &stack_on(slot, device);
    }
    auto const n = static_cast<std::size_t>(size);
    void* p      = r->allocate(n, gpumem::cuda_stream_view{stream});
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
    if (!d.stack) { return; }  // not ours: nothing was allocated on this device
    r = &d.stack->top();
  }
  r->deallocate(ptr, static_cast<std::size_t>(size), gpumem::cuda_stream_view{stream});
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
  for (int k = 0; k < pool_slots; ++k) {
    auto& slot = pool_table[static_cast<std::size_t>(k)];
    std::lock_guard lock{slot.mutex};
    if (slot.open || slot.segments.load() != 0) { continue; }
    slot.open      = true;
    slot.spec      = text;
    slot.runtime   = static_cast<gpumem::detail::runtime*>(runtime);
    slot.simulated = simulated != 0;
    for (auto& d : slot.devices) {
      d.stack.reset();
      d.meter.reset();
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
    }
  }
  std::array<u64, 5> const v{slot.segments.load(), slot.segment_bytes.load(),
                             slot.allocations.load(), slot.failures.load(), held};
  int const count = n < static_cast<int>(v.size()) ? n : static_cast<int>(v.size());
  for (int i = 0; i < count && out != nullptr; ++i) { out[i] = v[static_cast<std::size_t>(i)]; }
  return count;
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
  int const m = n < static_cast<int>(v.size()) ? n : static_cast<int>(v.size());
  for (int i = 0; i < m && out != nullptr; ++i) { out[i] = v[static_cast<std::size_t>(i)]; }
  return m;
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
