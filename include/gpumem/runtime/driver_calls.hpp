// gpumem/runtime/driver_calls.hpp — how many driver calls of each kind a stack made through a
// metered_runtime, and the host time spent in them (what a replay's cold pass costs, call by
// call: creates, maps, access grants, unmaps, releases, synchronizations, ...).
//
// driver_call_counts is a plain value: `after - before` is what happened in between.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace gpumem::trace {

/// The kinds counted. `other` is every other call that asks the device for something (event
/// creation and destruction, reservations, granularity queries, copies and sets, pool trims).
enum class driver_call : std::uint8_t {
  create,              ///< cuMemCreate
  map,                 ///< cuMemMap
  set_access,          ///< cuMemSetAccess
  unmap,               ///< cuMemUnmap
  release,             ///< cuMemRelease
  malloc,              ///< cudaMalloc and the other leaf allocations
  free,                ///< cudaFree and the like
  alloc_async,         ///< cudaMallocFromPoolAsync
  free_async,          ///< cudaFreeAsync
  event_record,        ///< cudaEventRecord
  event_query,         ///< cudaEventQuery
  stream_wait,         ///< cudaStreamWaitEvent
  event_synchronize,   ///< cudaEventSynchronize
  stream_synchronize,  ///< cudaStreamSynchronize
  device_synchronize,  ///< cudaDeviceSynchronize
  other,
};
inline constexpr std::size_t driver_call_kinds = static_cast<std::size_t>(driver_call::other) + 1;

/// The name a report shows ("create", "set_access", ...).
[[nodiscard]] constexpr std::string_view to_string(driver_call k) noexcept
{
  constexpr std::array<std::string_view, driver_call_kinds> names{"create",
                                                                  "map",
                                                                  "set_access",
                                                                  "unmap",
                                                                  "release",
                                                                  "malloc",
                                                                  "free",
                                                                  "alloc_async",
                                                                  "free_async",
                                                                  "event_record",
                                                                  "event_query",
                                                                  "stream_wait",
                                                                  "event_synchronize",
                                                                  "stream_synchronize",
                                                                  "device_synchronize",
                                                                  "other"};
  return names[static_cast<std::size_t>(k)];
}

struct driver_call_count {
  std::uint64_t calls{};
  std::uint64_t nanoseconds{};  ///< host time inside the calls
};

struct driver_call_counts {
  std::array<driver_call_count, driver_call_kinds> of{};

  [[nodiscard]] driver_call_count const& operator[](driver_call k) const noexcept
  {
    return of[static_cast<std::size_t>(k)];
  }
  [[nodiscard]] std::uint64_t total_calls() const noexcept
  {
    std::uint64_t n{};
    for (auto const& c : of) { n += c.calls; }
    return n;
  }
  [[nodiscard]] std::uint64_t total_nanoseconds() const noexcept
  {
    std::uint64_t n{};
    for (auto const& c : of) { n += c.nanoseconds; }
    return n;
  }
  /// What happened between `before` and this.
  [[nodiscard]] driver_call_counts operator-(driver_call_counts const& before) const noexcept
  {
    driver_call_counts d;
    for (std::size_t i = 0; i < driver_call_kinds; ++i) {
      d.of[i] = {of[i].calls - before.of[i].calls, of[i].nanoseconds - before.of[i].nanoseconds};
    }
    return d;
  }
};

}  // namespace gpumem::trace
