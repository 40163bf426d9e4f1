// gpumem/mr/vmm_mapping_event.hpp — what a virtual-memory pool tells its map and unmap listeners
// (vmm_pool_memory_resource::add_map_listener / add_unmap_listener).
//
// One event is one run of adjacent physical handles: [ptr, ptr + bytes) is mapped (or is about to
// be unmapped) and `handles` are the CUmemGenericAllocationHandle values of its handles, in address
// order, with their sizes in `handle_bytes`. A handle is only valid while mapped: a listener that
// keeps one must not use it after the matching unmap event.
#pragma once

#include <gpumem/runtime.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace gpumem {

/// Why memory was mapped or unmapped.
enum class vmm_mapping_cause {
  growth,  ///< new memory for an allocation (map), or free memory moved to serve one (both)
  trim,    ///< free memory given back: trim_to, the release threshold, out of memory (unmap)
  pause,   ///< pause() gives every mapping back (unmap, before it)
  resume,  ///< resume() maps the same layout again (map)
  home,    ///< free memory moved back where it was when the pool was last wholly free (both)
};

[[nodiscard]] constexpr char const* to_string(vmm_mapping_cause cause) noexcept
{
  switch (cause) {
    case vmm_mapping_cause::growth:
      return "growth";
    case vmm_mapping_cause::trim:
      return "trim";
    case vmm_mapping_cause::pause:
      return "pause";
    case vmm_mapping_cause::resume:
      return "resume";
    case vmm_mapping_cause::home:
      return "home";
  }
  return "unknown";
}

struct vmm_mapping_event {
  void* ptr{};
  std::size_t bytes{};
  std::vector<gpumem::vmm_handle> handles;  ///< in address order
  vmm_mapping_cause cause{};
  bool mapped{};  ///< true: [ptr, ptr + bytes) was just mapped; false: it is being unmapped
  /// Each handle's size, in the order of `handles` (they tile [ptr, ptr + bytes) when complete;
  /// both are empty when host memory ran out while the event was recorded).
  std::vector<std::size_t> handle_bytes;
};

/// A listener; called outside the pool's locks (it may allocate from and free to the pool).
using vmm_mapping_listener = std::function<void(vmm_mapping_event const&)>;

/// Names a listener for remove_listener().
using vmm_listener_id = std::uint64_t;

}  // namespace gpumem
