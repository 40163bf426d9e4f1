// gpumem/pool/pool_location.hpp — where a pool's memory lives (or, for managed pools, prefers to).
#pragma once

#include <string>

namespace gpumem::pools {

enum class location_kind {
  none,       ///< no preferred location (managed pools only)
  device,     ///< GPU memory of device `id`
  host,       ///< host memory on no particular NUMA node (`id` ignored)
  host_numa,  ///< host memory on NUMA node `id`
};

[[nodiscard]] char const* to_string(location_kind kind) noexcept;
struct pool_location;
/// "device 1", "host_numa 0", "host", "none": a location for messages.
[[nodiscard]] std::string to_string(pool_location loc);

/// A location: a kind and an id (device ordinal or NUMA node). Build with the named factories.
struct pool_location {
  location_kind kind{location_kind::device};
  int id{0};

  [[nodiscard]] static constexpr pool_location device(int ordinal) noexcept
  {
    return {location_kind::device, ordinal};
  }
  [[nodiscard]] static constexpr pool_location host() noexcept { return {location_kind::host, 0}; }
  [[nodiscard]] static constexpr pool_location host_numa(int node) noexcept
  {
    return {location_kind::host_numa, node};
  }
  [[nodiscard]] static constexpr pool_location none() noexcept { return {location_kind::none, 0}; }

  friend constexpr bool operator==(pool_location, pool_location) noexcept = default;
};

}  // namespace gpumem::pools

// The earlier spellings: each name is also gpumem::<name> (the same entity).
namespace gpumem {
using pools::location_kind;
using pools::pool_location;
using pools::to_string;
}  // namespace gpumem
