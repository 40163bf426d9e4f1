// The host stand-in's streams and events (src/detail only): positions of enqueued and completed
// work, and waits between streams. Shared by host_runtime and its pool model.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace gpumem::detail::host_model {

struct stream_rec;

/// Work enqueued on the waiting stream after position `at` waits for `dep` to reach `dep_at`.
struct wait_rec {
  std::uint64_t at;
  stream_rec* dep;
  std::uint64_t dep_at;
};

struct stream_rec {
  std::uint64_t enqueued{};
  std::uint64_t completed{};
  std::vector<wait_rec> waits;  // unsatisfied waits only
  /// Every stream this one ever waited on, with the furthest position waited for (kept after
  /// the wait is satisfied: the pool model's event-dependency reuse asks it).
  std::unordered_map<stream_rec const*, std::uint64_t> waited_on;
};

struct event_rec {
  stream_rec* stream{};  // null until recorded
  std::uint64_t position{};
  /// The waits of `stream` unsatisfied when it was recorded. As in CUDA, a wait is work of its
  /// stream ("all future work" waits, an event recorded later included): the event completes
  /// only once they are satisfied too, and a stream that waits on it waits for them as well.
  std::vector<wait_rec> waited;
};

}  // namespace gpumem::detail::host_model
