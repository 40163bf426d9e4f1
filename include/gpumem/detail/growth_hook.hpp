// gpumem/detail/growth_hook.hpp — a resource that lets its observers give memory back before the
// resource grows (not API). The per-thread cache registers with the pool under it, so that the
// blocks the growing thread holds go back to the pool, which then tries its free lists again,
// before it takes memory it does not hold (physical memory, for the virtual-memory pool).
#pragma once

namespace gpumem::detail {

class growth_hook_target {
 public:
  /// Called under the resource's grow lock by the thread that needs more memory. Returns true
  /// when it gave memory back (deallocated into the resource). Must not allocate from it.
  using hook = bool (*)(void* context) noexcept;
  /// Adds a hook; every hook added runs before each growth, in the order added (two caches over
  /// one pool both give their memory back). Thread-safe; may throw bad_alloc (nothing added).
  virtual void add_before_growth(hook fn, void* context) = 0;
  /// Removes the hooks added with `context` (an observer going away). Thread-safe.
  virtual void remove_before_growth(void* context) noexcept = 0;
  /// True for a pool that maps only the memory it needs (the virtual-memory pool): blocks held
  /// in a cache above it make it grow, so such a cache keeps little (see thread_floor_bytes).
  [[nodiscard]] virtual bool lean() const noexcept = 0;

 protected:
  growth_hook_target()                                     = default;
  growth_hook_target(growth_hook_target const&)            = default;
  growth_hook_target& operator=(growth_hook_target const&) = default;
  ~growth_hook_target()                                    = default;
};

}  // namespace gpumem::detail
