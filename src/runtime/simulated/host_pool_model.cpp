// The host stand-in's memory pools. See host_pool_model.hpp for what is modelled.
#include "host_pool_model.hpp"

#include <gpumem/align.hpp>

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

namespace gpumem::detail::host_model {
namespace {

constexpr std::uint64_t export_magic = 0x67706D656D706F6FULL;  // "gpmempoo"

struct segment {
  std::size_t size{};     ///< bytes reserved (a multiple of the granularity)
  std::size_t request{};  ///< bytes asked for by the live allocation
  bool live{};
  stream_rec* freed_on{};  ///< null: free and complete for everyone (or never used)
  std::uint64_t freed_at{};
};

/// The pointer export data: which pool, which address.
struct export_record {
  std::uint64_t magic;
  void const* pool;
  std::uintptr_t addr;
};
static_assert(sizeof(export_record) <= sizeof(cudaMemPoolPtrExportData));

bool free_completed(segment const& s) noexcept
{
  return s.freed_on == nullptr || s.freed_on->completed >= s.freed_at;
}

std::pair<int, int> key(cudaMemLocation const& loc) noexcept
{
  return {static_cast<int>(loc.type), loc.type == cudaMemLocationTypeHost ? 0 : loc.id};
}

/// The inode of an open descriptor, or 0.
std::uintptr_t inode_of(int fd) noexcept
{
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) { return 0; }
  return static_cast<std::uintptr_t>(st.st_ino);
}

bool valid_flags(cudaMemAccessFlags f) noexcept
{
  return f == cudaMemAccessFlagsProtNone || f == cudaMemAccessFlagsProtRead ||
         f == cudaMemAccessFlagsProtReadWrite;
}

}  // namespace

struct host_pool_model::pool_rec {
  cudaMemPoolProps props{};
  bool is_default{};
  bool destroyed{};    ///< destroyed while allocations live: kept until they are freed
  pool_rec* origin{};  ///< imported pools: the exporter's pool
  int pinned_fd{-1};   ///< exported: keeps the descriptor's inode alive
  bool exported{};
  std::uint64_t release_threshold{};
  bool follow_events{true}, opportunistic{true}, internal_dependencies{true};
  std::uint64_t reserved{}, reserved_high{}, used{}, used_high{};
  std::map<std::pair<int, int>, cudaMemAccessFlags> access;
  std::map<std::uintptr_t, segment> segments;  ///< by address
  std::multiset<std::uintptr_t> imported;      ///< imported pools: mappings (one per import)

  /// The reuse policy `a` names, or null.
  bool* reuse_flag(cudaMemPoolAttr a) noexcept
  {
    switch (a) {
      case cudaMemPoolReuseFollowEventDependencies:
        return &follow_events;
      case cudaMemPoolReuseAllowOpportunistic:
        return &opportunistic;
      case cudaMemPoolReuseAllowInternalDependencies:
        return &internal_dependencies;
      default:
        return nullptr;
    }
  }
  /// The byte count `a` names (threshold, statistics), or null.
  std::uint64_t* counter(cudaMemPoolAttr a) noexcept
  {
    switch (a) {
      case cudaMemPoolAttrReleaseThreshold:
        return &release_threshold;
      case cudaMemPoolAttrReservedMemCurrent:
        return &reserved;
      case cudaMemPoolAttrReservedMemHigh:
        return &reserved_high;
      case cudaMemPoolAttrUsedMemCurrent:
        return &used;
      case cudaMemPoolAttrUsedMemHigh:
        return &used_high;
      default:
        return nullptr;
    }
  }
  [[nodiscard]] bool home_is_device(int d) const noexcept
  {
    return props.location.type == cudaMemLocationTypeDevice && props.location.id == d;
  }
  /// Pinned host memory (a host or host NUMA pool): the CPU can read and write it from the start.
  [[nodiscard]] bool home_is_host() const noexcept
  {
    return props.location.type == cudaMemLocationTypeHost ||
           props.location.type == cudaMemLocationTypeHostNuma;
  }
  segment* live_at(std::uintptr_t addr)
  {
    auto it = segments.find(addr);
    return it != segments.end() && it->second.live ? &it->second : nullptr;
  }
  void count_use(std::size_t bytes)
  {
    used += bytes;
    used_high = std::max(used_high, used);
  }
  void count_reserve(std::size_t bytes)
  {
    reserved += bytes;
    reserved_high = std::max(reserved_high, reserved);
  }
};

host_pool_model::host_pool_model(hooks h) : hooks_{std::move(h)} {}

host_pool_model::~host_pool_model()
{
  for (auto& [handle, p] : pools_) {
    if (p->pinned_fd >= 0) { ::close(p->pinned_fd); }
    if (p->origin != nullptr) { continue; }
    for (auto& [addr, seg] : p->segments) {
      hooks_.give_memory(reinterpret_cast<void*>(addr), seg.size);
    }
  }
}

std::size_t host_pool_model::reserved_bytes() const noexcept
{
  std::size_t sum{};
  for (auto const& [handle, p] : pools_) {
    if (p->origin == nullptr) { sum += p->reserved; }
  }
  return sum;
}

host_pool_model::pool_rec* host_pool_model::find(cudaMemPool_t pool) const
{
  auto it = pools_.find(pool);
  return it == pools_.end() || it->second->destroyed ? nullptr : it->second.get();
}

host_pool_model::pool_rec* host_pool_model::owner_of(void const* ptr) const
{
  auto const addr = reinterpret_cast<std::uintptr_t>(ptr);
  for (auto const& [handle, p] : pools_) {
    if (p->origin != nullptr) { continue; }
    auto it = p->segments.upper_bound(addr);
    if (it == p->segments.begin()) { continue; }
    --it;
    if (addr < it->first + it->second.size) { return p.get(); }
  }
  return nullptr;
}

bool host_pool_model::owns(void const* ptr) const
{
  return owner_of(ptr) != nullptr;
}

// -- pools -------------------------------------------------------------------------------------

cudaError_t host_pool_model::create(cudaMemPool_t* pool, cudaMemPoolProps const* props)
{
  if (pool == nullptr || props == nullptr) { return cudaErrorInvalidValue; }
  auto const& loc = props->location;
  if (loc.type == cudaMemLocationTypeDevice && (loc.id < 0 || loc.id >= hooks_.device_count)) {
    return cudaErrorInvalidDevice;
  }
  if ((props->handleTypes & cudaMemHandleTypeFabric) != 0) { return cudaErrorNotSupported; }
  auto rec   = std::make_unique<pool_rec>();
  rec->props = *props;
  auto* h    = reinterpret_cast<cudaMemPool_t>(rec.get());
  pools_.emplace(h, std::move(rec));
  *pool = h;
  return cudaSuccess;
}

cudaError_t host_pool_model::destroy(cudaMemPool_t pool)
{
  auto* p = find(pool);
  if (p == nullptr || p->is_default) { return cudaErrorInvalidValue; }
  for (auto& [device, current] : current_) {
    if (current == pool) { current = defaults_.at(device); }
  }
  if (p->pinned_fd >= 0) {
    exported_fds_.erase(inode_of(p->pinned_fd));
    ::close(p->pinned_fd);
    p->pinned_fd = -1;
  }
  if (p->origin == nullptr && p->used > 0) {
    release(*p, 0);
    p->destroyed = true;  // CUDA defers the release until the last allocation is freed
    return cudaSuccess;
  }
  drop(*p);
  return cudaSuccess;
}

cudaError_t host_pool_model::default_pool(cudaMemPool_t* pool, int device)
{
  if (pool == nullptr) { return cudaErrorInvalidValue; }
  if (device < 0 || device >= hooks_.device_count) { return cudaErrorInvalidDevice; }
  auto it = defaults_.find(device);
  if (it == defaults_.end()) {
    cudaMemPoolProps props{};
    props.allocType     = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id   = device;
    cudaMemPool_t made{};
    if (auto const st = create(&made, &props); st != cudaSuccess) { return st; }
    find(made)->is_default = true;
    it                     = defaults_.emplace(device, made).first;
    current_.emplace(device, made);
  }
  *pool = it->second;
  return cudaSuccess;
}

cudaError_t host_pool_model::current_pool(cudaMemPool_t* pool, int device)
{
  cudaMemPool_t def{};
  if (auto const st = default_pool(&def, device); st != cudaSuccess) { return st; }
  *pool = current_.at(device);
  return cudaSuccess;
}

cudaError_t host_pool_model::set_current_pool(int device, cudaMemPool_t pool)
{
  cudaMemPool_t def{};
  if (auto const st = default_pool(&def, device); st != cudaSuccess) { return st; }
  auto const* p = find(pool);
  if (p == nullptr || p->origin != nullptr || !p->home_is_device(device)) {
    return cudaErrorInvalidValue;
  }
  current_[device] = pool;
  return cudaSuccess;
}

// -- attributes ----------------------------------------------------------------------------------

cudaError_t host_pool_model::set_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                           void const* value)
{
  auto* p = find(pool);
  if (p == nullptr || value == nullptr || p->origin != nullptr) { return cudaErrorInvalidValue; }
  auto const u64 = [value] { return *static_cast<std::uint64_t const*>(value); };
  if (auto* flag = p->reuse_flag(attr)) {
    *flag = *static_cast<int const*>(value) != 0;
  } else if (attr == cudaMemPoolAttrReleaseThreshold) {
    p->release_threshold = u64();
  } else if (attr == cudaMemPoolAttrReservedMemHigh || attr == cudaMemPoolAttrUsedMemHigh) {
    if (u64() != 0) { return cudaErrorInvalidValue; }  // a high mark can only be reset
    *p->counter(attr) = attr == cudaMemPoolAttrReservedMemHigh ? p->reserved : p->used;
  } else {
    return cudaErrorInvalidValue;  // the current values are read-only
  }
  return cudaSuccess;
}

cudaError_t host_pool_model::get_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value)
{
  auto* p = find(pool);
  // Driver 580 refuses every attribute of an imported pool; the model does the same.
  if (p == nullptr || value == nullptr || p->origin != nullptr) { return cudaErrorInvalidValue; }
  if (auto const* flag = p->reuse_flag(attr)) {
    *static_cast<int*>(value) = *flag ? 1 : 0;
  } else if (auto const* n = p->counter(attr)) {
    *static_cast<std::uint64_t*>(value) = *n;
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

// -- access --------------------------------------------------------------------------------------

cudaError_t host_pool_model::set_access(cudaMemPool_t pool, cudaMemAccessDesc const* list,
                                        std::size_t count)
{
  auto* p = find(pool);
  if (p == nullptr || (list == nullptr && count > 0)) { return cudaErrorInvalidValue; }
  bool const device_pool = p->props.location.type == cudaMemLocationTypeDevice;
  for (std::size_t i = 0; i < count; ++i) {  // all checked first: a refusal changes nothing
    auto const& d = list[i];
    if (!valid_flags(d.flags)) { return cudaErrorInvalidValue; }
    if (d.location.type == cudaMemLocationTypeDevice) {
      if (d.location.id < 0 || d.location.id >= hooks_.device_count) {
        return cudaErrorInvalidDevice;
      }
      if (p->home_is_device(d.location.id) && d.flags != cudaMemAccessFlagsProtReadWrite) {
        return cudaErrorInvalidValue;
      }
      if (d.flags == cudaMemAccessFlagsProtRead) {
        return cudaErrorNotSupported;  // seen on the H100 (driver 580): read-only for a device
      }
    } else if (device_pool) {
      return cudaErrorNotSupported;  // seen on the H100: no host access to device pools
    }
  }
  for (std::size_t i = 0; i < count; ++i) { p->access[key(list[i].location)] = list[i].flags; }
  return cudaSuccess;
}

cudaError_t host_pool_model::get_access(cudaMemAccessFlags* flags, cudaMemPool_t pool,
                                        cudaMemLocation const* location)
{
  auto* p = find(pool);
  if (p == nullptr || flags == nullptr || location == nullptr) { return cudaErrorInvalidValue; }
  if (location->type == cudaMemLocationTypeDevice) {
    if (location->id < 0 || location->id >= hooks_.device_count) { return cudaErrorInvalidDevice; }
    if (p->home_is_device(location->id)) {
      *flags = cudaMemAccessFlagsProtReadWrite;
      return cudaSuccess;
    }
  } else if (p->home_is_host() && (location->type == cudaMemLocationTypeHost ||
                                   location->type == cudaMemLocationTypeHostNuma)) {
    *flags = cudaMemAccessFlagsProtReadWrite;  // CUDA: a host pool's memory is CPU-accessible from
                                               // the start
    return cudaSuccess;
  }
  auto it = p->access.find(key(*location));
  *flags  = it == p->access.end() ? cudaMemAccessFlagsProtNone : it->second;
  return cudaSuccess;
}

// -- allocation ----------------------------------------------------------------------------------

cudaError_t host_pool_model::new_segment(pool_rec& p, std::size_t size, void** ptr)
{
  if (p.props.maxSize != 0 && size > p.props.maxSize - std::min(p.reserved, p.props.maxSize)) {
    return cudaErrorMemoryAllocation;
  }
  void* mem = hooks_.take_memory(size);
  if (mem == nullptr) {
    release(p, 0);  // what the pool can give back before it fails
    mem = hooks_.take_memory(size);
  }
  if (mem == nullptr) { return cudaErrorMemoryAllocation; }
  p.segments.emplace(reinterpret_cast<std::uintptr_t>(mem), segment{size});
  p.count_reserve(size);
  *ptr = mem;
  return cudaSuccess;
}

cudaError_t host_pool_model::allocate(void** ptr, std::size_t bytes, cudaMemPool_t pool,
                                      cudaStream_t stream)
{
  auto* p = find(pool);
  if (ptr == nullptr || p == nullptr || p->origin != nullptr || bytes == 0) {
    return cudaErrorInvalidValue;  // imported pools cannot allocate
  }
  if (bytes > std::numeric_limits<std::size_t>::max() - granularity) {
    return cudaErrorMemoryAllocation;
  }
  stream_rec* s{};
  try {
    s = &hooks_.resolve(stream);
  } catch (...) {
    return cudaErrorInvalidResourceHandle;
  }
  auto const need = align_up(bytes, granularity);
  // Reuse: the smallest free segment that fits and that the reuse policies allow.
  auto const allowed = [&](segment const& seg) {
    if (seg.freed_on == nullptr || seg.freed_on == s) { return true; }
    if (p->opportunistic && free_completed(seg)) { return true; }
    auto it = s->waited_on.find(seg.freed_on);
    return p->follow_events && it != s->waited_on.end() && it->second >= seg.freed_at;
  };
  segment* best{};
  segment* fallback{};  // reusable only through an internal dependency
  std::uintptr_t best_addr{}, fallback_addr{};
  for (auto& [addr, seg] : p->segments) {
    if (seg.live || seg.size < need) { continue; }
    if (allowed(seg)) {
      if (best == nullptr || seg.size < best->size) { best = &seg, best_addr = addr; }
    } else if (fallback == nullptr || seg.size < fallback->size) {
      fallback = &seg, fallback_addr = addr;
    }
  }
  if (best == nullptr && fallback != nullptr && p->internal_dependencies) {
    s->waits.push_back({s->enqueued, fallback->freed_on, fallback->freed_at});
    best = fallback, best_addr = fallback_addr;
  }
  if (best == nullptr) {
    void* mem{};
    if (auto const st = new_segment(*p, need, &mem); st != cudaSuccess) { return st; }
    best_addr = reinterpret_cast<std::uintptr_t>(mem);
    best      = &p->segments.at(best_addr);
  }
  best->live     = true;
  best->request  = bytes;
  best->freed_on = nullptr;
  p->count_use(best->size);
  *ptr = reinterpret_cast<void*>(best_addr);
  return cudaSuccess;
}

cudaError_t host_pool_model::free_async(void* ptr, cudaStream_t stream)
{
  try {
    return free_block(ptr, &hooks_.resolve(stream));
  } catch (...) {
    return cudaErrorInvalidResourceHandle;
  }
}

cudaError_t host_pool_model::free_now(void* ptr)
{
  return free_block(ptr, nullptr);
}

cudaError_t host_pool_model::free_block(void* ptr, stream_rec* freed_on)
{
  auto const addr = reinterpret_cast<std::uintptr_t>(ptr);
  for (auto& [handle, p] : pools_) {  // an importer's mapping is freed first
    if (p->origin == nullptr) { continue; }
    if (auto it = p->imported.find(addr); it != p->imported.end()) {
      p->imported.erase(it);
      return cudaSuccess;
    }
  }
  auto* p   = owner_of(ptr);
  auto* seg = p != nullptr ? p->live_at(addr) : nullptr;
  if (seg == nullptr) { return cudaErrorInvalidValue; }
  seg->live     = false;
  seg->freed_on = freed_on;
  seg->freed_at = freed_on != nullptr ? freed_on->enqueued : 0;
  p->used -= seg->size;
  if (p->destroyed && p->used == 0) { drop(*p); }  // the last allocation of a destroyed pool
  return cudaSuccess;
}

void host_pool_model::drop(pool_rec& p)
{
  if (p.origin == nullptr) {
    for (auto const& [addr, seg] : p.segments) {
      hooks_.give_memory(reinterpret_cast<void*>(addr), seg.size);
    }
  }
  pools_.erase(reinterpret_cast<cudaMemPool_t>(&p));
}

void host_pool_model::release(pool_rec& p, std::size_t keep)
{
  for (auto it = p.segments.begin(); it != p.segments.end() && p.reserved > keep;) {
    auto const& seg = it->second;
    if (seg.live || !free_completed(seg)) {
      ++it;
      continue;
    }
    hooks_.give_memory(reinterpret_cast<void*>(it->first), seg.size);
    p.reserved -= seg.size;
    it = p.segments.erase(it);
  }
}

cudaError_t host_pool_model::trim_to(cudaMemPool_t pool, std::size_t keep)
{
  auto* p = find(pool);
  if (p == nullptr) { return cudaErrorInvalidValue; }
  if (p->origin == nullptr) { release(*p, keep); }
  return cudaSuccess;
}

void host_pool_model::synchronized()
{
  for (auto& [handle, p] : pools_) {
    if (p->origin == nullptr) { release(*p, p->release_threshold); }
  }
}

// -- sharing -------------------------------------------------------------------------------------

cudaError_t host_pool_model::export_pool(void* handle, cudaMemPool_t pool,
                                         cudaMemAllocationHandleType type)
{
  auto* p = find(pool);
  if (p == nullptr || handle == nullptr || p->origin != nullptr) { return cudaErrorInvalidValue; }
  if ((p->props.handleTypes & type) == 0 || type != cudaMemHandleTypePosixFileDescriptor) {
    return cudaErrorInvalidValue;
  }
  if (p->pinned_fd < 0) {
    p->pinned_fd = ::eventfd(0, EFD_CLOEXEC);
    if (p->pinned_fd < 0) { return cudaErrorOperatingSystem; }
    exported_fds_[inode_of(p->pinned_fd)] = p;
  }
  int const fd = ::fcntl(p->pinned_fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) { return cudaErrorOperatingSystem; }
  *static_cast<int*>(handle) = fd;
  p->exported                = true;
  return cudaSuccess;
}

cudaError_t host_pool_model::import_pool(cudaMemPool_t* pool, void* handle,
                                         cudaMemAllocationHandleType type)
{
  if (pool == nullptr) { return cudaErrorInvalidValue; }
  if (type != cudaMemHandleTypePosixFileDescriptor) { return cudaErrorNotSupported; }
  auto const fd = static_cast<int>(reinterpret_cast<std::intptr_t>(handle));
  auto it       = exported_fds_.find(inode_of(fd));
  if (inode_of(fd) == 0 || it == exported_fds_.end()) { return cudaErrorInvalidValue; }
  for (auto const& [h, p] : pools_) {  // the driver gives the same handle to a second import
    if (p->origin == it->second) {
      *pool = h;
      return cudaSuccess;
    }
  }
  auto rec    = std::make_unique<pool_rec>();
  rec->props  = it->second->props;
  rec->origin = it->second;
  auto* h     = reinterpret_cast<cudaMemPool_t>(rec.get());
  pools_.emplace(h, std::move(rec));
  *pool = h;
  return cudaSuccess;
}

cudaError_t host_pool_model::export_pointer(cudaMemPoolPtrExportData* data, void* ptr)
{
  auto* p = owner_of(ptr);
  if (data == nullptr || p == nullptr ||
      p->live_at(reinterpret_cast<std::uintptr_t>(ptr)) == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (p->props.handleTypes == cudaMemHandleTypeNone || !p->exported) {
    return cudaErrorInvalidValue;  // driver 580: the pool must be shared first
  }
  export_record const r{export_magic, p, reinterpret_cast<std::uintptr_t>(ptr)};
  std::memset(data, 0, sizeof *data);
  std::memcpy(data, &r, sizeof r);
  return cudaSuccess;
}

cudaError_t host_pool_model::import_pointer(void** ptr, cudaMemPool_t pool,
                                            cudaMemPoolPtrExportData const* data)
{
  auto* p = find(pool);
  if (ptr == nullptr || data == nullptr || p == nullptr || p->origin == nullptr) {
    return cudaErrorInvalidValue;
  }
  export_record r{};
  std::memcpy(&r, data, sizeof r);
  if (r.magic != export_magic || r.pool != p->origin || p->origin->live_at(r.addr) == nullptr) {
    return cudaErrorInvalidValue;
  }
  p->imported.insert(r.addr);
  *ptr = reinterpret_cast<void*>(r.addr);
  return cudaSuccess;
}

bool host_pool_model::attributes(void const* ptr, cudaMemoryType* type, int* device,
                                 cudaMemPool_t* pool, void const** base, std::size_t* size) const
{
  auto* p = owner_of(ptr);
  if (p == nullptr) { return false; }
  auto const addr    = reinterpret_cast<std::uintptr_t>(ptr);
  auto it            = std::prev(p->segments.upper_bound(addr));
  auto const& loc    = p->props.location;
  bool const managed = p->props.allocType == cudaMemAllocationTypeManaged;
  bool const on_host =
      loc.type == cudaMemLocationTypeHost || loc.type == cudaMemLocationTypeHostNuma;
  *type   = managed ? cudaMemoryTypeManaged : on_host ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
  *device = loc.type == cudaMemLocationTypeDevice ? loc.id : -1;
  *pool   = reinterpret_cast<cudaMemPool_t>(p);
  *base   = reinterpret_cast<void const*>(it->first);
  *size   = it->second.live ? it->second.request : it->second.size;
  return true;
}

}  // namespace gpumem::detail::host_model
