// memory_pool, memory_pool_ref, typed attributes, access, capabilities and device pools: the CUDA
// side of the pool API. The rules that need no CUDA are in pool_rules.cpp.
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/scoped_current_device.hpp>
#include <gpumem/error.hpp>
#include <gpumem/pool/device_pools.hpp>
#include <gpumem/pool/memory_pool.hpp>
#include <gpumem/pool/pool_capabilities.hpp>
#include <gpumem/pool/pointer_query.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

namespace gpumem::pools {
namespace {

void require_pool(cudaMemPool_t pool, char const* what)
{
  GPUMEM_EXPECTS(pool != nullptr, logic_error,
                 detail::format(what, ": the memory pool is empty (moved-from or null)"));
}

[[noreturn]] void throw_cuda(cudaError_t status, std::string const& msg)
{
  detail::throw_cuda_failure(status, msg);
}

cudaMemLocation to_cuda(pool_location loc)
{
  cudaMemLocation out{};
  switch (loc.kind) {
    case location_kind::none:
      out.type = cudaMemLocationTypeNone;
      break;
    case location_kind::device:
      out.type = cudaMemLocationTypeDevice;
      break;
    case location_kind::host:
      out.type = cudaMemLocationTypeHost;
      break;
    case location_kind::host_numa:
      out.type = cudaMemLocationTypeHostNuma;
      break;
  }
  out.id = loc.kind == location_kind::host || loc.kind == location_kind::none ? 0 : loc.id;
  return out;
}

cudaMemPoolProps to_cuda(pool_properties const& p)
{
  cudaMemPoolProps out{};
  out.allocType = p.allocation_type == pool_allocation_type::managed ? cudaMemAllocationTypeManaged
                                                                     : cudaMemAllocationTypePinned;
  out.handleTypes = static_cast<cudaMemAllocationHandleType>(p.handle_types.bits());
  out.location    = to_cuda(p.location);
  out.maxSize     = p.max_size_bytes;
  out.usage       = p.usage;
  return out;
}

int attribute_or_zero(gpumem::runtime& rt, cudaDeviceAttr attr, int device)
{
  try {
    return rt.device_attribute(attr, device);
  } catch (cuda_error const&) {
    return 0;
  }
}

bool all_devices_have_managed_access(gpumem::runtime& rt, int count)
{
  for (int d = 0; d < count; ++d) {
    if (attribute_or_zero(rt, cudaDevAttrConcurrentManagedAccess, d) == 0) { return false; }
  }
  return count > 0;
}

void fill_device_capabilities(gpumem::runtime& rt, pool_capabilities& c)
{
  int const d = c.device;
  if (c.driver_version >= pools_min_driver) {
    c.pools_supported = attribute_or_zero(rt, cudaDevAttrMemoryPoolsSupported, d) != 0;
  }
  if (c.driver_version >= ipc_pools_min_driver) {
    c.supported_handle_types = handle_type_set::from_bits(
        static_cast<unsigned>(attribute_or_zero(rt, cudaDevAttrMemoryPoolSupportedHandleTypes, d)));
  }
  if (c.driver_version >= host_pools_min_driver) {
    c.host_pools_supported = attribute_or_zero(rt, cudaDevAttrHostMemoryPoolsSupported, d) != 0;
    c.host_numa_pools_supported =
        attribute_or_zero(rt, cudaDevAttrHostNumaMemoryPoolsSupported, d) != 0;
  }
  c.concurrent_managed_access_all = all_devices_have_managed_access(rt, c.device_count);
}

int device_of(gpumem::runtime& rt, pool_properties const& props)
{
  if (props.location.kind == location_kind::device) { return props.location.id; }
  try {
    return rt.current_device();
  } catch (cuda_error const&) {
    return 0;
  }
}

/// Why there is no usable device (the CUDA runtime's own words when it is the CUDA runtime).
std::string no_device_reason(gpumem::runtime& rt)
{
  if (&rt != &gpumem::cuda_device()) { return "no usable CUDA device (the runtime has none)"; }
  int count{};
  auto const st = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();
  return detail::format("no usable CUDA device: cudaGetDeviceCount: ", cudaGetErrorName(st), " (",
                        cudaGetErrorString(st), ")");
}

std::string creation_hint(cudaError_t status, pool_properties const& props)
{
  if (props.handle_types.contains(allocation_handle_type::fabric)) {
    auto const why = why_fabric_unavailable();
    return why.empty() ? "fabric handles requested; check IMEX channel permissions" : why;
  }
  if (status == cudaErrorNotSupported) {
    return "the device or driver does not support this combination of properties";
  }
  if (status == cudaErrorInvalidValue) { return "CUDA rejected the properties"; }
  return "CUDA could not create the pool";
}

}  // namespace

// -- capabilities --------------------------------------------------------------------------------

pool_capabilities query_pool_capabilities(cuda_device_id device, gpumem::runtime& rt)
{
  pool_capabilities c{};
  c.device         = device.value();
  c.driver_version = rt.driver_version();
  if (cudaRuntimeGetVersion(&c.runtime_version) != cudaSuccess) { (void)cudaGetLastError(); }
  c.fabric_unavailable_reason = why_fabric_unavailable();
  c.device_count              = rt.device_count();
  if (c.device_count <= 0) {
    c.device_count           = 0;
    c.device_unusable_reason = no_device_reason(rt);
    return c;
  }
  if (c.device < 0 || c.device >= c.device_count) {
    c.device_unusable_reason =
        detail::format("device ", c.device, " does not exist (", c.device_count, " devices)");
    return c;
  }
  fill_device_capabilities(rt, c);
  return c;
}

// -- attributes ----------------------------------------------------------------------------------

}  // namespace gpumem::pools

namespace gpumem::detail {

using namespace gpumem::pools;  // this file's helpers above

char const* attribute_name(cudaMemPoolAttr attr) noexcept
{
  switch (attr) {
    case cudaMemPoolReuseFollowEventDependencies:
      return "reuse_follow_event_dependencies";
    case cudaMemPoolReuseAllowOpportunistic:
      return "reuse_allow_opportunistic";
    case cudaMemPoolReuseAllowInternalDependencies:
      return "reuse_allow_internal_dependencies";
    case cudaMemPoolAttrReleaseThreshold:
      return "release_threshold";
    case cudaMemPoolAttrReservedMemCurrent:
      return "reserved_mem_current";
    case cudaMemPoolAttrReservedMemHigh:
      return "reserved_mem_high";
    case cudaMemPoolAttrUsedMemCurrent:
      return "used_mem_current";
    case cudaMemPoolAttrUsedMemHigh:
      return "used_mem_high";
  }
  return "unknown attribute";
}

std::uint64_t pool_get_u64(runtime& rt, cudaMemPool_t pool, cudaMemPoolAttr attr)
{
  require_pool(pool, attribute_name(attr));
  std::uint64_t value{};
  auto const st = rt.mem_pool_get_attribute(pool, attr, &value);
  if (st != cudaSuccess) {
    throw_cuda(st, format("reading pool attribute ", attribute_name(attr)));
  }
  return value;
}

bool pool_get_flag(runtime& rt, cudaMemPool_t pool, cudaMemPoolAttr attr)
{
  require_pool(pool, attribute_name(attr));
  int value{};
  auto const st = rt.mem_pool_get_attribute(pool, attr, &value);
  if (st != cudaSuccess) {
    throw_cuda(st, format("reading pool attribute ", attribute_name(attr)));
  }
  return value != 0;
}

void pool_set_u64(runtime& rt, cudaMemPool_t pool, cudaMemPoolAttr attr, std::uint64_t value)
{
  require_pool(pool, attribute_name(attr));
  std::uint64_t v = value;
  auto const st   = rt.mem_pool_set_attribute(pool, attr, &v);
  if (st != cudaSuccess) {
    throw_cuda(st, format("setting pool attribute ", attribute_name(attr), " to ", value));
  }
}

void pool_set_flag(runtime& rt, cudaMemPool_t pool, cudaMemPoolAttr attr, bool value)
{
  require_pool(pool, attribute_name(attr));
  int v         = value ? 1 : 0;
  auto const st = rt.mem_pool_set_attribute(pool, attr, &v);
  if (st != cudaSuccess) {
    throw_cuda(st, format("setting pool attribute ", attribute_name(attr), " to ", v));
  }
}

pool_usage_statistics pool_statistics(runtime& rt, cudaMemPool_t pool)
{
  return {pool_get_u64(rt, pool, cudaMemPoolAttrReservedMemCurrent),
          pool_get_u64(rt, pool, cudaMemPoolAttrReservedMemHigh),
          pool_get_u64(rt, pool, cudaMemPoolAttrUsedMemCurrent),
          pool_get_u64(rt, pool, cudaMemPoolAttrUsedMemHigh)};
}

// -- access --------------------------------------------------------------------------------------

namespace {

bool is_other_device(pool_location owner, access_request const& r) noexcept
{
  return r.accessor_kind == location_kind::device && owner.kind == location_kind::device &&
         owner.id != r.accessor;
}

/// The request for one descriptor, with peer capability asked of CUDA where it matters.
access_request make_request(runtime& rt, pool_location owner, access_descriptor const& d,
                            int device_count)
{
  access_request r{owner, d.accessor.id, d.flags, device_count, false, d.accessor.kind};
  bool const known = r.accessor >= 0 && r.accessor < device_count;
  if (known && is_other_device(owner, r)) {
    int can{};
    auto const st = rt.device_can_access_peer(&can, r.accessor, owner.id);
    if (st != cudaSuccess) { throw_cuda(st, "cudaDeviceCanAccessPeer"); }
    r.peer_capable = can != 0;
  }
  return r;
}

/// Throws the refusal of `r` (peer capability missing: cuda_error, else logic_error).
[[noreturn]] void refuse(access_request const& r, std::string const& why)
{
  bool const known = r.accessor >= 0 && r.accessor < r.device_count;
  if (known && !r.peer_capable && is_other_device(r.owner, r)) {
    throw cuda_error{cudaErrorPeerAccessUnsupported, user_message("pool access refused: " + why)};
  }
  GPUMEM_FAIL(logic_error, "pool access refused: " + why);
}

}  // namespace

void set_pool_access(runtime& rt, cudaMemPool_t pool, pool_location owner,
                     std::span<access_descriptor const> descriptors)
{
  require_pool(pool, "set_access");
  int const count = rt.device_count();
  std::vector<cudaMemAccessDesc> cuda_descs;
  cuda_descs.reserve(descriptors.size());
  for (auto const& d : descriptors) {
    auto const r   = make_request(rt, owner, d, count);
    auto const why = access_refusal(r);
    if (!why.empty()) { refuse(r, why); }
    bool const is_owner = r.accessor_kind == location_kind::device &&
                          owner.kind == location_kind::device && owner.id == r.accessor;
    if (is_owner) { continue; }  // the owner always has read_write access; nothing to change
    cudaMemAccessDesc desc{};
    desc.location = to_cuda(d.accessor);
    desc.flags    = static_cast<cudaMemAccessFlags>(d.flags);
    cuda_descs.push_back(desc);
  }
  if (cuda_descs.empty()) { return; }
  auto const st = rt.mem_pool_set_access(pool, cuda_descs.data(), cuda_descs.size());
  if (st != cudaSuccess) {
    std::string who;
    for (auto const& d : descriptors) {
      who += (who.empty() ? "" : ", ") + to_string(d.accessor) + ": " + to_string(d.flags);
    }
    bool const read_only = std::any_of(descriptors.begin(), descriptors.end(), [](auto const& d) {
      return d.flags == access_flags::read && d.accessor.kind == location_kind::device;
    });
    auto const hint = st == cudaErrorNotSupported && read_only
                          ? std::string{" (read-only access by a device is not supported by this "
                                        "driver; give read_write or none)"}
                          : std::string{};
    throw_cuda(st, format("cudaMemPoolSetAccess(", who, ")", hint));
  }
}

void set_pool_access(runtime& rt, cudaMemPool_t pool, pool_location owner, cuda_device_id accessor,
                     access_flags flags)
{
  access_descriptor const d{pool_location::device(accessor.value()), flags};
  set_pool_access(rt, pool, owner, std::span{&d, 1});
}

access_flags get_pool_access(runtime& rt, cudaMemPool_t pool, pool_location accessor)
{
  require_pool(pool, "access");
  cudaMemAccessFlags flags{};
  cudaMemLocation loc = to_cuda(accessor);
  auto const st       = rt.mem_pool_get_access(&flags, pool, &loc);
  if (st != cudaSuccess) {
    throw_cuda(st, format("cudaMemPoolGetAccess(", to_string(accessor), ")"));
  }
  return static_cast<access_flags>(flags);
}

access_flags get_pool_access(runtime& rt, cudaMemPool_t pool, cuda_device_id accessor)
{
  return get_pool_access(rt, pool, pool_location::device(accessor.value()));
}

namespace {

/// The devices with read-write access to `pool`.
std::vector<int> read_write_devices(runtime& rt, cudaMemPool_t pool)
{
  std::vector<int> out;
  int const count = rt.device_count();
  for (int d = 0; d < count; ++d) {
    cudaMemAccessFlags flags{};
    cudaMemLocation loc{cudaMemLocationTypeDevice, d};
    if (rt.mem_pool_get_access(&flags, pool, &loc) != cudaSuccess) { continue; }
    if (flags == cudaMemAccessFlagsProtReadWrite) { out.push_back(d); }
  }
  return out;
}

/// The device whose default or current pool `pool` is, among `candidates`.
std::optional<int> device_pool_owner(runtime& rt, cudaMemPool_t pool,
                                     std::vector<int> const& candidates)
{
  for (int d : candidates) {
    cudaMemPool_t def{}, cur{};
    bool const is_def = rt.device_get_default_mem_pool(&def, d) == cudaSuccess && def == pool;
    bool const is_cur = rt.device_get_mem_pool(&cur, d) == cudaSuccess && cur == pool;
    if (is_def || is_cur) { return d; }
  }
  return std::nullopt;
}

}  // namespace

std::optional<pool_location> find_pool_home(runtime& rt, cudaMemPool_t pool)
{
  require_pool(pool, "find_pool_home");
  auto const rw = read_write_devices(rt, pool);
  if (rw.size() == 1) { return pool_location::device(rw.front()); }
  if (auto const d = device_pool_owner(rt, pool, rw)) { return pool_location::device(*d); }
  return std::nullopt;
}

}  // namespace gpumem::detail

namespace gpumem::pools {

// -- memory_pool_ref -----------------------------------------------------------------------------

memory_pool_ref::memory_pool_ref(cudaMemPool_t pool, pool_location location, gpumem::runtime& rt)
    : pool_{pool}, location_{location}, runtime_{&rt}
{
  require_pool(pool, "memory_pool_ref");
}

void memory_pool_ref::reset_high_water_marks() const
{
  reset_high_water<pool_attr::reserved_mem_high>();
  reset_high_water<pool_attr::used_mem_high>();
}

void memory_pool_ref::trim_to(std::size_t min_bytes_to_keep) const
{
  require_pool(pool_, "trim_to");
  auto const st = runtime_->mem_pool_trim_to(pool_, min_bytes_to_keep);
  if (st != cudaSuccess) {
    throw_cuda(st, detail::format("cudaMemPoolTrimTo(", detail::bytes_str(min_bytes_to_keep), ")"));
  }
}

namespace {

/// Free and total memory of the device `loc` names (0, 0 for other locations or on failure).
std::pair<std::size_t, std::size_t> device_memory(gpumem::runtime& rt, pool_location loc)
{
  if (loc.kind != location_kind::device) { return {0, 0}; }
  try {
    detail::scoped_current_device on{loc.id, rt};
    auto const info = rt.memory_info();
    return {info.free_bytes, info.total_bytes};
  } catch (...) {
    return {0, 0};
  }
}

}  // namespace

void* memory_pool_ref::allocate(std::size_t bytes, cuda_stream_view stream) const
{
  require_pool(pool_, "allocate");
  void* ptr{};
  auto const st = runtime_->malloc_from_pool_async(&ptr, bytes, pool_, stream.value());
  if (st == cudaSuccess) [[likely]] { return ptr; }
  auto const msg =
      detail::format("memory pool ", static_cast<void*>(pool_), " on ", to_string(location_),
                     ": cannot allocate ", detail::bytes_str(bytes), " on stream ",
                     static_cast<void*>(stream.value()), ": ", cudaGetErrorName(st));
  auto const [free, total] = device_memory(*runtime_, location_);
  // CUDA may answer an impossible size with cudaErrorInvalidValue; it is still out of memory.
  bool const exhausted = st == cudaErrorMemoryAllocation || (total != 0 && bytes > total);
  if (!exhausted) { throw_cuda(st, msg); }
  auto const s = detail::pool_statistics(*runtime_, pool_);
  auto const device =
      total == 0 ? std::string{}
                 : detail::format("; ", to_string(location_), " has ", detail::bytes_str(free),
                                  " free of ", detail::bytes_str(total));
  GPUMEM_FAIL(out_of_memory,
              detail::format(msg, "; pool reserves ", detail::bytes_str(s.reserved_bytes),
                             " of which ", detail::bytes_str(s.used_bytes), " in use", device));
}

bool memory_pool_ref::owns(void const* ptr) const
{
  require_pool(pool_, "owns");
  return ptr != nullptr && query_pointer(ptr, *runtime_).pool == pool_;
}

void memory_pool_ref::deallocate(void* ptr, cuda_stream_view stream) const noexcept
{
  (void)runtime_->free_async(ptr, stream.value());  // never throws; CUDA reports nothing useful
}

// -- memory_pool ---------------------------------------------------------------------------------

memory_pool::memory_pool(pool_properties const& props, gpumem::runtime& rt) : props_{props}
{
  validate(props);
  auto const caps = query_pool_capabilities(cuda_device_id{device_of(rt, props)}, rt);
  auto const why  = diagnose_unsupported(props, caps);
  if (!why.empty()) {
    throw cuda_error{cudaErrorNotSupported, detail::user_message("cannot create memory pool (" +
                                                                 to_string(props) + "): " + why)};
  }
  auto const cuda_props = to_cuda(props);
  cudaMemPool_t pool{};
  auto const st = rt.mem_pool_create(&pool, &cuda_props);
  if (st != cudaSuccess) {
    throw_cuda(st, "cannot create memory pool (" + to_string(props) +
                       "): " + creation_hint(st, props) + "; cudaMemPoolCreate");
  }
  reset_to(pool, props.location, rt);
}

memory_pool::memory_pool(memory_pool&& other) noexcept
    : memory_pool_ref{}, props_{other.props_}, exported_{other.exported_.load()}
{
  reset_to(other.handle(), other.location(), other.runtime());
  other.reset_to(nullptr, {}, other.runtime());
}

memory_pool& memory_pool::operator=(memory_pool&& other) noexcept
{
  if (this != &other) {
    destroy();
    props_ = other.props_;
    exported_.store(other.exported_.load());
    reset_to(other.handle(), other.location(), other.runtime());
    other.reset_to(nullptr, {}, other.runtime());
  }
  return *this;
}

memory_pool::~memory_pool()
{
  destroy();
}

void memory_pool::destroy() noexcept
{
  if (handle() != nullptr) { (void)runtime().mem_pool_destroy(handle()); }
  reset_to(nullptr, {}, runtime());
}

shareable_pool_handle memory_pool::export_handle(allocation_handle_type type) const
{
  require_pool(handle(), "export_handle");
  GPUMEM_EXPECTS(
      type != allocation_handle_type::none && props_.handle_types.contains(type), logic_error,
      detail::format("cannot export memory pool as ", to_string(type),
                     ": the pool was created with handle types ", to_string(props_.handle_types)));
  auto const cuda_type = static_cast<cudaMemAllocationHandleType>(type);
  if (type == allocation_handle_type::fabric) {
    cudaMemFabricHandle_t fabric{};
    auto const st = runtime().mem_pool_export_to_shareable_handle(&fabric, handle(), cuda_type);
    if (st != cudaSuccess) { throw_cuda(st, "exporting memory pool as fabric handle"); }
    fabric_handle out{};
    static_assert(sizeof fabric == sizeof out.bytes);
    std::memcpy(out.bytes.data(), &fabric, sizeof fabric);
    exported_.store(true);
    return shareable_pool_handle{out};
  }
  int fd{-1};
  auto const st = runtime().mem_pool_export_to_shareable_handle(&fd, handle(), cuda_type);
  if (st != cudaSuccess) { throw_cuda(st, "exporting memory pool as a file descriptor"); }
  exported_.store(true);
  return shareable_pool_handle{owned_fd{fd}};
}

// -- default and current pools -------------------------------------------------------------------

memory_pool_ref default_pool(cuda_device_id device, gpumem::runtime& rt)
{
  cudaMemPool_t pool{};
  auto const st = rt.device_get_default_mem_pool(&pool, device.value());
  if (st != cudaSuccess) {
    throw_cuda(st, detail::format("cudaDeviceGetDefaultMemPool(device ", device.value(), ")"));
  }
  return {pool, pool_location::device(device.value()), rt};
}

memory_pool_ref current_pool(cuda_device_id device, gpumem::runtime& rt)
{
  cudaMemPool_t pool{};
  auto const st = rt.device_get_mem_pool(&pool, device.value());
  if (st != cudaSuccess) {
    throw_cuda(st, detail::format("cudaDeviceGetMemPool(device ", device.value(), ")"));
  }
  return {pool, pool_location::device(device.value()), rt};
}

void set_current_pool(cuda_device_id device, memory_pool_ref pool)
{
  auto const loc = pool.location();
  GPUMEM_EXPECTS(loc.kind == location_kind::device && loc.id == device.value(), logic_error,
                 detail::format("only a pool on device ", device.value(),
                                " can be its current pool; this pool is at ", to_string(loc.kind),
                                " ", loc.id));
  auto const st = pool.runtime().device_set_mem_pool(device.value(), pool.handle());
  if (st != cudaSuccess) {
    throw_cuda(st, detail::format("cudaDeviceSetMemPool(device ", device.value(), ")"));
  }
}

scoped_current_pool::scoped_current_pool(cuda_device_id device, memory_pool_ref pool)
    : device_{device}, previous_{current_pool(device, pool.runtime())}
{
  set_current_pool(device, pool);
}

scoped_current_pool::~scoped_current_pool()
{
  (void)previous_.runtime().device_set_mem_pool(device_.value(), previous_.handle());
}

}  // namespace gpumem::pools
