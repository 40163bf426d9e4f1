// gpumem/pool/pool_access.hpp — which devices may access a pool's memory (seed 002 F.10).
//
// Access applies to every allocation of the pool, past and future. The pool's own device always has
// read-write access, which cannot be revoked. Another device can be given access only when it has
// peer capability with the pool's device (cudaDeviceCanAccessPeer); gpumem checks that first and
// says so, because CUDA may otherwise accept the call and fail the pool's next allocation.
#pragma once

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/pool/pool_location.hpp>

#include <cuda_runtime_api.h>

#include <string>

namespace gpumem {

enum class access_flags {
  none       = 0,  ///< not accessible
  read       = 1,  ///< read-only
  read_write = 3,  ///< read and write
};

[[nodiscard]] char const* to_string(access_flags flags) noexcept;

namespace detail {

/// What is known about a request "give `accessor` access `flags` to a pool at `owner`".
struct access_request {
  pool_location owner;
  int accessor{};
  access_flags flags{access_flags::read_write};
  int device_count{};
  bool peer_capable{};  ///< cudaDeviceCanAccessPeer(accessor, owner.id)
};

/// Why the request must be refused (a sentence), or empty. Pure: tests drive it without a GPU.
[[nodiscard]] std::string access_refusal(access_request const& request);

/// Checks the request (peer capability first) and calls cudaMemPoolSetAccess.
/// Throws logic_error (bad device, revoking the owner), cuda_error(cudaErrorPeerAccessUnsupported)
/// when peer capability is missing, cuda_error when CUDA refuses.
void set_pool_access(cudaMemPool_t pool, pool_location owner, cuda_device_id accessor,
                     access_flags flags);
[[nodiscard]] access_flags get_pool_access(cudaMemPool_t pool, cuda_device_id accessor);

}  // namespace detail

}  // namespace gpumem
