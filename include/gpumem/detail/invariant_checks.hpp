// gpumem/detail/invariant_checks.hpp — the invariant-check build (not API).
//
// Configured with -DGPUMEM_CHECK_INVARIANTS=ON, the library runs a resource's check_invariants()
// after each of its slow paths (a pool's growth and reclaim, an arena's refill, a per-thread
// cache's refill and flushes): a broken invariant aborts the program at the call that broke it,
// with the invariant named on stderr. A check needs the resource at rest, so in that build every
// call into a checked resource holds the resource's call_gate: calls are serialized. The build is
// for finding bookkeeping bugs, not for timing or races (the sanitizer builds run the threads).
// In every other build the gate is an empty member and the checks compile to nothing.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>

namespace gpumem::detail {

#if defined(GPUMEM_CHECK_INVARIANTS)
inline constexpr bool invariant_check_build = true;

/// Serializes the calls into one resource (re-entrant: a pool's growth hook may call back in).
class call_gate {
 public:
  [[nodiscard]] std::unique_lock<std::recursive_mutex> enter() { return std::unique_lock{mutex_}; }

 private:
  std::recursive_mutex mutex_;
};
#else
inline constexpr bool invariant_check_build = false;

/// Nothing outside the invariant-check build.
class call_gate {
 public:
  struct open {};
  [[nodiscard]] open enter() noexcept { return {}; }
};
#endif

/// The checks run so far in this process (0 outside the invariant-check build), for tests.
inline std::atomic<std::uint64_t> invariant_checks_run{0};

/// In the invariant-check build, runs `check` (a resource's check_invariants) after the slow path
/// `where`; a broken invariant prints its message and aborts. Nothing in other builds.
template <class Check>
void check_after_slow_path([[maybe_unused]] char const* where,
                           [[maybe_unused]] Check&& check) noexcept
{
  if constexpr (invariant_check_build) {
    invariant_checks_run.fetch_add(1, std::memory_order_relaxed);
    try {
      check();
    } catch (std::exception const& e) {
      std::fprintf(stderr, "gpumem: invariant broken after %s: %s\n", where, e.what());
      std::abort();
    }
  }
}

}  // namespace gpumem::detail
