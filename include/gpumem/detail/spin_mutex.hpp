// gpumem/detail/spin_mutex.hpp — a one-word lock for very short critical sections (a hash-map
// probe, a free-list operation): lock is one atomic exchange, unlock one release store (not API).
//
// Waiters spin on a plain load, then yield the CPU after a short while, so that an oversubscribed
// machine (more threads than cores, a preempted holder) still makes progress. Not fair and not
// recursive. Meets BasicLockable and Lockable (std::lock_guard, std::unique_lock).
// Thread safety: all members are thread-safe.
#pragma once

#include <atomic>
#include <thread>

namespace gpumem::detail {

class spin_mutex {
 public:
  void lock() noexcept
  {
    if (locked_.exchange(true, std::memory_order_acquire)) { lock_contended(); }
  }
  [[nodiscard]] bool try_lock() noexcept
  {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  [[gnu::noinline]] void lock_contended() noexcept
  {
    do {
      for (int spins = 0; locked_.load(std::memory_order_relaxed); ++spins) {
        if (spins >= spins_before_yield) { std::this_thread::yield(); }
      }
    } while (locked_.exchange(true, std::memory_order_acquire));
  }
  static constexpr int spins_before_yield = 64;

  std::atomic<bool> locked_{false};
};

}  // namespace gpumem::detail
