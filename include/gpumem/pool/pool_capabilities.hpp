// gpumem/pool/pool_capabilities.hpp — what a device and driver support of the pool API, and the
// diagnosis of "why can't this pool be created here".
#pragma once

#include <gpumem/runtime.hpp>

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/pool/allocation_handle_type.hpp>
#include <gpumem/pool/pool_properties.hpp>

#include <string>

namespace gpumem::pools {

/// Oldest driver versions (CUDA_VERSION encoding) for each feature.
inline constexpr int pools_min_driver         = 11020;  ///< cudaMallocAsync, pools
inline constexpr int ipc_pools_min_driver     = 11030;  ///< IPC pools, usage statistics
inline constexpr int host_pools_min_driver    = 12060;  ///< host / host NUMA pools
inline constexpr int managed_pools_min_driver = 13000;  ///< managed pools

struct pool_capabilities {
  int device{};
  int device_count{};
  int driver_version{};  ///< 0 when no driver
  int runtime_version{};
  bool pools_supported{};
  handle_type_set supported_handle_types{};
  bool host_pools_supported{};
  bool host_numa_pools_supported{};
  bool concurrent_managed_access_all{};   ///< on every device (managed pools need it)
  std::string fabric_unavailable_reason;  ///< empty when IMEX channels are present
  std::string device_unusable_reason;     ///< empty when `device` exists and CUDA works
};

/// Queries CUDA (driver version checked before each attribute, since older drivers lack some).
/// Never throws for a missing GPU: device_unusable_reason says why.
[[nodiscard]] pool_capabilities query_pool_capabilities(
    cuda_device_id device, gpumem::runtime& rt = gpumem::cuda_device());

/// Why fabric handles cannot work on this machine (no IMEX channel device), or empty.
[[nodiscard]] std::string why_fabric_unavailable();

/// Why `props` cannot be created given `caps` (a sentence naming the missing capability), or
/// empty. Pure: tests drive it with made-up capabilities.
[[nodiscard]] std::string diagnose_unsupported(pool_properties const& props,
                                               pool_capabilities const& caps);

}  // namespace gpumem::pools

// The earlier spellings: each name is also gpumem::<name> (the same entity).
namespace gpumem {
using pools::diagnose_unsupported;
using pools::host_pools_min_driver;
using pools::ipc_pools_min_driver;
using pools::managed_pools_min_driver;
using pools::pool_capabilities;
using pools::pools_min_driver;
using pools::query_pool_capabilities;
using pools::why_fabric_unavailable;
}  // namespace gpumem
