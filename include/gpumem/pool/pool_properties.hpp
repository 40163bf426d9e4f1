// gpumem/pool/pool_properties.hpp — what a memory_pool is created from, and the rules a set of
// properties must follow. The rules are checked here, without calling CUDA, so that a bad
// combination is refused with the rule it breaks instead of CUDA's bare cudaErrorInvalidValue.
//
// Rules (CUDA's; each message names one):
//  R1 a device location needs a device ordinal >= 0;
//  R2 a host NUMA location needs a NUMA node id >= 0;
//  R3 host pools (location host) cannot be IPC-capable: handle_types must be {none};
//  R4 "no preferred location" (location none) is only for managed pools;
//  R5 managed pools cannot be IPC-capable: handle_types must be {none};
//  R6 managed pools need max_size_bytes == 0;
//  R7 managed pools need usage == 0 (decompression is not supported for managed memory);
//  R8 handle_types holds only known types; win32 / win32_kmt are Windows-only;
//  R9 usage holds only known bits (pool_usage_hw_decompress).
#pragma once

#include <gpumem/pool/allocation_handle_type.hpp>
#include <gpumem/pool/pool_location.hpp>

#include <cstddef>
#include <string>

namespace gpumem::pools {

/// What kind of memory the pool hands out.
enum class pool_allocation_type {
  pinned,   ///< non-migratable memory at `location` (device or host)
  managed,  ///< unified memory; `location` is only the preferred location
};

[[nodiscard]] char const* to_string(pool_allocation_type type) noexcept;

/// `usage` bit: the pool's memory may be the target of hardware decompression.
inline constexpr unsigned short pool_usage_hw_decompress = 0x2;

/// Properties of a new pool. The defaults describe a pool like device 0's default pool.
struct pool_properties {
  pool_location location{pool_location::device(0)};
  pool_allocation_type allocation_type{pool_allocation_type::pinned};
  handle_type_set handle_types{};  ///< empty: not IPC-capable
  std::size_t max_size_bytes{0};   ///< 0: a system-dependent maximum
  unsigned short usage{0};         ///< bitmask of pool_usage_* values
};

/// The first rule (R1..R9 above) `props` breaks, as a sentence naming the rule and the values;
/// empty when `props` is valid. Never calls CUDA.
[[nodiscard]] std::string find_broken_rule(pool_properties const& props);

/// Throws logic_error("invalid pool_properties: <rule>") when find_broken_rule is not empty.
void validate(pool_properties const& props);

/// "device 0, pinned, handle types {none}, max size unlimited, usage 0x0"
[[nodiscard]] std::string to_string(pool_properties const& props);

}  // namespace gpumem::pools

// The earlier spellings: each name is also gpumem::<name> (the same entity).
namespace gpumem {
using pools::find_broken_rule;
using pools::pool_allocation_type;
using pools::pool_properties;
using pools::pool_usage_hw_decompress;
using pools::to_string;
using pools::validate;
}  // namespace gpumem
