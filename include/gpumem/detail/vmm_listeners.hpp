// gpumem/detail/vmm_listeners.hpp — the map and unmap listeners of a virtual-memory pool, and the
// events waiting to reach them (not API).
//
// Listeners are called outside every lock of the pool: events that happen under the pool's locks
// (a growth inside an allocation, trim_to) are queued there and delivered by the same call once
// its locks are released; pause and resume call them directly (before unmapping, after mapping).
// A listener may allocate from and free to the pool. An exception from a listener is caught and
// counted (failures()): the pool's operation has happened and cannot be undone by a listener.
//
// Invariants: ids are unique and never reused; pending_ is true while queue_ is not empty.
// Thread safety: every member may be called from any thread (one mutex, never held while a
// listener runs).
#pragma once

#include <gpumem/mr/vmm_mapping_event.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

namespace gpumem::detail {

class vmm_listeners {
 public:
  /// Adds a listener for map (mapped true) or unmap events. Throws logic_error when fn is empty.
  vmm_listener_id add(bool mapped, vmm_mapping_listener fn);
  /// False when no listener has this id (already removed).
  bool remove(vmm_listener_id id) noexcept;
  /// True while at least one listener exists (a relaxed load: events are only recorded then).
  [[nodiscard]] bool any() const noexcept { return count_.load(std::memory_order_relaxed) != 0; }
  /// Calls the listeners of each event's kind with it, in order, on this thread.
  void notify(std::vector<vmm_mapping_event> const& events) noexcept;
  /// Queues events recorded under the pool's locks, for deliver().
  void queue(std::vector<vmm_mapping_event> events) noexcept;
  /// True when queued events wait (a relaxed load on the allocation path).
  [[nodiscard]] bool pending() const noexcept { return pending_.load(std::memory_order_relaxed); }
  /// Takes the queued events and notifies them (outside the pool's locks).
  void deliver() noexcept;
  /// Exceptions thrown by listeners so far (caught).
  [[nodiscard]] std::uint64_t failures() const noexcept { return failures_.load(); }

 private:
  struct entry {
    vmm_listener_id id{};
    bool mapped{};
    std::shared_ptr<vmm_mapping_listener const> fn;  // shared: a call outlives a remove()
  };
  mutable std::mutex mutex_;
  std::vector<entry> entries_;  // guarded by mutex_
  vmm_listener_id next_id_{1};  // guarded by mutex_
  std::atomic<std::size_t> count_{};
  std::vector<vmm_mapping_event> queue_;  // guarded by mutex_
  std::atomic<bool> pending_{false};
  std::atomic<std::uint64_t> failures_{};
};

}  // namespace gpumem::detail
