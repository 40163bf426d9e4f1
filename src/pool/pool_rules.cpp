// The pool API's rules and diagnoses that need no CUDA: property validation (R1-R9), capability
// diagnosis, access refusal, names. Tested without a GPU (tests/unit/memory_pool_test.cpp).
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>
#include <gpumem/pool/allocation_handle_type.hpp>
#include <gpumem/pool/pool_access.hpp>
#include <gpumem/pool/pool_capabilities.hpp>
#include <gpumem/pool/pool_properties.hpp>

#include <cuda_runtime_api.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace gpumem::pools {

// The public enums convert to CUDA's by value (static_cast where pools are created, exported and
// given access); these tie every value to the toolkit's, so a toolkit that renumbers them breaks
// the build here instead of the calls.
static_assert(static_cast<unsigned>(allocation_handle_type::none) == cudaMemHandleTypeNone);
static_assert(static_cast<unsigned>(allocation_handle_type::posix_file_descriptor) ==
              cudaMemHandleTypePosixFileDescriptor);
static_assert(static_cast<unsigned>(allocation_handle_type::win32) == cudaMemHandleTypeWin32);
static_assert(static_cast<unsigned>(allocation_handle_type::win32_kmt) ==
              cudaMemHandleTypeWin32Kmt);
static_assert(static_cast<unsigned>(allocation_handle_type::fabric) == cudaMemHandleTypeFabric);
static_assert(static_cast<int>(access_flags::none) == cudaMemAccessFlagsProtNone);
static_assert(static_cast<int>(access_flags::read) == cudaMemAccessFlagsProtRead);
static_assert(static_cast<int>(access_flags::read_write) == cudaMemAccessFlagsProtReadWrite);

namespace {

constexpr handle_type_set known_handle_types{
    allocation_handle_type::posix_file_descriptor, allocation_handle_type::win32,
    allocation_handle_type::win32_kmt, allocation_handle_type::fabric};
constexpr handle_type_set windows_handle_types{allocation_handle_type::win32,
                                               allocation_handle_type::win32_kmt};
constexpr unsigned short known_usage_bits = pool_usage_hw_decompress;

std::string hex(unsigned value)
{
  return detail::format("0x", std::hex, value);
}

std::string location_rule(pool_properties const& p)
{
  auto const& loc = p.location;
  if (loc.kind == location_kind::device && loc.id < 0) {
    return detail::format("R1: a device location needs a device ordinal >= 0 (got ", loc.id, ")");
  }
  if (loc.kind == location_kind::host_numa && loc.id < 0) {
    return detail::format("R2: a host NUMA location needs a NUMA node id >= 0 (got ", loc.id, ")");
  }
  if (loc.kind == location_kind::host && !p.handle_types.empty()) {
    return "R3: host pools cannot be IPC-capable: handle_types must be {none} for location host "
           "(got " +
           to_string(p.handle_types) + ")";
  }
  if (loc.kind == location_kind::none && p.allocation_type != pool_allocation_type::managed) {
    return "R4: location none (no preferred location) is only valid for managed pools";
  }
  return {};
}

std::string managed_rule(pool_properties const& p)
{
  if (p.allocation_type != pool_allocation_type::managed) { return {}; }
  if (!p.handle_types.empty()) {
    return "R5: managed pools cannot be IPC-capable: handle_types must be {none} (got " +
           to_string(p.handle_types) + ")";
  }
  if (p.max_size_bytes != 0) {
    return detail::format("R6: managed pools need max_size_bytes == 0 (got ",
                          detail::bytes_str(p.max_size_bytes), ")");
  }
  if (p.usage != 0) {
    return detail::format(
        "R7: managed pools need usage == 0: decompression is not supported for "
        "managed memory (got ",
        hex(p.usage), ")");
  }
  return {};
}

std::string bits_rule(pool_properties const& p)
{
  auto const unknown = p.handle_types.minus(known_handle_types);
  if (!unknown.empty()) { return "R8: handle_types holds unknown bits " + hex(unknown.bits()); }
  auto const windows = p.handle_types.minus(p.handle_types.minus(windows_handle_types));
  if (!windows.empty()) {
    return "R8: " + to_string(windows) + " handles are Windows-only; this build is POSIX";
  }
  if ((p.usage & ~known_usage_bits) != 0) {
    return "R9: usage holds unknown bits " + hex(p.usage & ~known_usage_bits);
  }
  return {};
}

}  // namespace

char const* to_string(allocation_handle_type type) noexcept
{
  switch (type) {
    case allocation_handle_type::none:
      return "none";
    case allocation_handle_type::posix_file_descriptor:
      return "posix_file_descriptor";
    case allocation_handle_type::win32:
      return "win32";
    case allocation_handle_type::win32_kmt:
      return "win32_kmt";
    case allocation_handle_type::fabric:
      return "fabric";
  }
  return "unknown";
}

std::string to_string(handle_type_set types)
{
  if (types.empty()) { return "{none}"; }
  std::string out = "{";
  unsigned rest   = types.bits();
  for (unsigned bit = 1; rest != 0; bit <<= 1) {
    if ((rest & bit) == 0) { continue; }
    rest &= ~bit;
    if (out.size() > 1) { out += ", "; }
    out += known_handle_types.contains(static_cast<allocation_handle_type>(bit))
               ? to_string(static_cast<allocation_handle_type>(bit))
               : hex(bit);
  }
  return out + "}";
}

char const* to_string(location_kind kind) noexcept
{
  switch (kind) {
    case location_kind::none:
      return "none";
    case location_kind::device:
      return "device";
    case location_kind::host:
      return "host";
    case location_kind::host_numa:
      return "host NUMA node";
  }
  return "unknown";
}

char const* to_string(pool_allocation_type type) noexcept
{
  return type == pool_allocation_type::managed ? "managed" : "pinned";
}

char const* to_string(access_flags flags) noexcept
{
  switch (flags) {
    case access_flags::none:
      return "none";
    case access_flags::read:
      return "read";
    case access_flags::read_write:
      return "read_write";
  }
  return "unknown";
}

std::string find_broken_rule(pool_properties const& props)
{
  for (auto const& rule : {bits_rule(props), location_rule(props), managed_rule(props)}) {
    if (!rule.empty()) { return rule; }
  }
  return {};
}

void validate(pool_properties const& props)
{
  auto const rule = find_broken_rule(props);
  GPUMEM_EXPECTS(rule.empty(), logic_error,
                 "invalid pool_properties (" + to_string(props) + "): " + rule);
}

std::string to_string(pool_location loc)
{
  bool const numbered = loc.kind == location_kind::device || loc.kind == location_kind::host_numa;
  return numbered ? detail::format(to_string(loc.kind), " ", loc.id)
                  : std::string{to_string(loc.kind)};
}

std::string to_string(pool_properties const& p)
{
  auto const loc = to_string(p.location);
  auto const max =
      p.max_size_bytes == 0 ? std::string{"system default"} : detail::bytes_str(p.max_size_bytes);
  return detail::format("location ", loc, ", ", to_string(p.allocation_type), ", handle types ",
                        to_string(p.handle_types), ", max size ", max, ", usage ", hex(p.usage));
}

std::string why_fabric_unavailable()
{
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path const dir{"/dev/nvidia-caps-imex-channels"};
  if (!fs::is_directory(dir, ec)) {
    return "no IMEX channels: /dev/nvidia-caps-imex-channels does not exist (fabric handles need "
           "an IMEX channel the process can open)";
  }
  for (auto const& entry : fs::directory_iterator{dir, ec}) {
    if (std::ifstream{entry.path()}.good()) { return {}; }
  }
  return "no IMEX channel in /dev/nvidia-caps-imex-channels is accessible to this process";
}

namespace {

std::string driver_rule(pool_properties const& p, pool_capabilities const& c)
{
  auto const need = [&](int version, char const* what) {
    return detail::format(what, " need CUDA driver ", version / 1000, ".", version % 1000 / 10,
                          " or newer; this driver is ", c.driver_version / 1000, ".",
                          c.driver_version % 1000 / 10);
  };
  if (c.driver_version < pools_min_driver) { return need(pools_min_driver, "memory pools"); }
  if (!p.handle_types.empty() && c.driver_version < ipc_pools_min_driver) {
    return need(ipc_pools_min_driver, "IPC pools");
  }
  bool const host =
      p.location.kind == location_kind::host || p.location.kind == location_kind::host_numa;
  if (host && p.allocation_type == pool_allocation_type::pinned &&
      c.driver_version < host_pools_min_driver) {
    return need(host_pools_min_driver, "host pools");
  }
  if (p.allocation_type == pool_allocation_type::managed &&
      c.driver_version < managed_pools_min_driver) {
    return need(managed_pools_min_driver, "managed pools");
  }
  return {};
}

std::string feature_rule(pool_properties const& p, pool_capabilities const& c)
{
  if (!c.pools_supported) {
    return detail::format("device ", c.device,
                          " does not support memory pools "
                          "(cudaDevAttrMemoryPoolsSupported == 0)");
  }
  if (p.handle_types.contains(allocation_handle_type::fabric) &&
      !c.fabric_unavailable_reason.empty()) {
    return "fabric handles unusable: " + c.fabric_unavailable_reason;
  }
  auto const missing = p.handle_types.minus(c.supported_handle_types);
  if (!missing.empty()) {
    return detail::format("device ", c.device, " does not support handle types ",
                          to_string(missing),
                          " for pools (supported: ", to_string(c.supported_handle_types), ")");
  }
  return {};
}

std::string location_feature_rule(pool_properties const& p, pool_capabilities const& c)
{
  bool const pinned = p.allocation_type == pool_allocation_type::pinned;
  if (pinned && p.location.kind == location_kind::host && !c.host_pools_supported) {
    return detail::format("device ", c.device,
                          " does not support host pools "
                          "(cudaDevAttrHostMemoryPoolsSupported == 0)");
  }
  if (pinned && p.location.kind == location_kind::host_numa && !c.host_numa_pools_supported) {
    return detail::format("device ", c.device,
                          " does not support host NUMA pools "
                          "(cudaDevAttrHostNumaMemoryPoolsSupported == 0)");
  }
  if (!pinned && !c.concurrent_managed_access_all) {
    return "managed pools need concurrentManagedAccess on every device, and at least one "
           "device lacks it";
  }
  if (p.location.kind == location_kind::device && p.location.id >= c.device_count) {
    return detail::format("device ", p.location.id, " does not exist (", c.device_count,
                          " devices)");
  }
  return {};
}

}  // namespace

std::string diagnose_unsupported(pool_properties const& props, pool_capabilities const& caps)
{
  if (!caps.device_unusable_reason.empty()) { return caps.device_unusable_reason; }
  for (auto const& why :
       {driver_rule(props, caps), feature_rule(props, caps), location_feature_rule(props, caps)}) {
    if (!why.empty()) { return why; }
  }
  return {};
}

}  // namespace gpumem::pools

namespace gpumem::detail {

std::string access_refusal(access_request const& r)
{
  if (r.accessor_kind == location_kind::none) {
    return "location none cannot be given access: name a device, the host or a host NUMA node";
  }
  if (r.accessor_kind == location_kind::host) { return {}; }
  if (r.accessor_kind == location_kind::host_numa) {
    return r.accessor >= 0
               ? std::string{}
               : format("host NUMA node ", r.accessor, " does not exist (ids are >= 0)");
  }
  if (r.accessor < 0 || r.accessor >= r.device_count) {
    return format("device ", r.accessor, " does not exist (", r.device_count, " devices)");
  }
  bool const owner_is_device = r.owner.kind == location_kind::device;
  if (owner_is_device && r.accessor == r.owner.id) {
    return r.flags == access_flags::read_write
               ? std::string{}
               : format("the pool's own device ", r.accessor,
                        " always has read_write access; it cannot be reduced to ",
                        to_string(r.flags));
  }
  if (owner_is_device && r.flags != access_flags::none && !r.peer_capable) {
    return format("device ", r.accessor, " cannot access memory of device ", r.owner.id,
                  ": no peer capability (cudaDeviceCanAccessPeer(", r.accessor, ", ", r.owner.id,
                  ") == 0)");
  }
  return {};
}

}  // namespace gpumem::detail

namespace gpumem::pools {

}  // namespace gpumem::pools
