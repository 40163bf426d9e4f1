// gpumem/pool/pool_access.hpp — which devices may access a pool's memory.
//
// Access applies to every allocation of the pool, past and future. The pool's own device always has
// read-write access, which cannot be revoked. Another device can be given access only when it has
// peer capability with the pool's device (cudaDeviceCanAccessPeer); gpumem checks that first and
// says so, because CUDA may otherwise accept the call and fail the pool's next allocation.
#pragma once

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/runtime.hpp>
#include <gpumem/pool/pool_location.hpp>

#include <cuda_runtime_api.h>

#include <optional>
#include <span>
#include <string>

namespace gpumem::pools {

enum class access_flags {
  none       = 0,  ///< not accessible
  read       = 1,  ///< read-only
  read_write = 3,  ///< read and write
};

[[nodiscard]] char const* to_string(access_flags flags) noexcept;

/// One entry of a pool's access list: who (a device, the host or a host NUMA node) gets what.
struct access_descriptor {
  pool_location accessor;
  access_flags flags{access_flags::read_write};
};

}  // namespace gpumem::pools

// The earlier spellings: each name is also gpumem::<name> (the same entity).
namespace gpumem {
using pools::access_descriptor;
using pools::access_flags;
using pools::to_string;
}  // namespace gpumem

namespace gpumem::detail {

/// What is known about a request "give `accessor` access `flags` to a pool at `owner`".
struct access_request {
  pool_location owner;
  int accessor{};  ///< device ordinal, or NUMA node for host_numa
  access_flags flags{access_flags::read_write};
  int device_count{};
  bool peer_capable{};  ///< cudaDeviceCanAccessPeer(accessor, owner.id)
  location_kind accessor_kind{location_kind::device};
};

/// Why the request must be refused (a sentence), or empty. Pure: tests drive it without a GPU.
[[nodiscard]] std::string access_refusal(access_request const& request);

/// Checks every request (peer capability first), then sets them all in one cudaMemPoolSetAccess
/// call: nothing changes when one is refused. Throws as the single-device form does.
void set_pool_access(runtime& rt, cudaMemPool_t pool, pool_location owner,
                     std::span<access_descriptor const> descriptors);
[[nodiscard]] access_flags get_pool_access(runtime& rt, cudaMemPool_t pool, pool_location accessor);

/// Checks the request (peer capability first) and calls cudaMemPoolSetAccess.
/// Throws logic_error (bad device, revoking the owner), cuda_error(cudaErrorPeerAccessUnsupported)
/// when peer capability is missing, cuda_error when CUDA refuses.
void set_pool_access(runtime& rt, cudaMemPool_t pool, pool_location owner, cuda_device_id accessor,
                     access_flags flags);
[[nodiscard]] access_flags get_pool_access(runtime& rt, cudaMemPool_t pool,
                                           cuda_device_id accessor);

/// The device a pool's memory lives on, found without guessing: the only device with read-write
/// access (a pool starts accessible from its own device alone, and imported pools do not inherit
/// the exporter's access), else the device whose default or current pool it is. Empty when the
/// pool does not say (e.g. several devices were given read-write access).
[[nodiscard]] std::optional<pool_location> find_pool_home(runtime& rt, cudaMemPool_t pool);

}  // namespace gpumem::detail
