// gpumem/detail/vmm_single_handles.hpp — allocations that are each one physical handle mapped
// once in an address range of its own, created exportable as a POSIX file descriptor (not API;
// the virtual-memory pool's allocate_single_handle). For memory sent to another process or
// registered for RDMA / NCCL, where a buffer must be one physical allocation that holds nothing
// else.
//
// allocate(bytes)   creates (shareable), reserves, maps and grants access (map_whole); a failure at
//                   any step undoes the steps before it.
// deallocate(p, S)  is stream-ordered: the allocation waits, behind an event recorded on S, until
//                   S has passed the free; release_passed() then unmaps and releases it. When no
//                   event can be recorded, it waits for release_passed(true), which synchronizes
//                   the device; when there is no host memory to wait in, S is synchronized and it
//                   is released at once.
//
// Invariants (check()): every live or waiting allocation is one whole mapping of its own handle
// in its own reservation, `bytes` a multiple of the granularity; count() == live + waiting;
// mapped_bytes() == sum of their bytes.
// Thread safety: every member may be called from any thread (one mutex; driver calls are made
// under it: these are slow paths by nature). count() is a relaxed atomic read.
#pragma once

#include <gpumem/detail/runtime.hpp>

#include <atomic>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

namespace gpumem::detail {

class vmm_single_handles {
 public:
  /// `device` owns the memory; `peers` get read-write access too. Handles are made with
  /// `properties`, always shareable.
  vmm_single_handles(runtime& rt, int device, std::vector<int> peers, std::size_t granularity,
                     vmm_handle_properties properties = {});
  vmm_single_handles(vmm_single_handles const&)            = delete;
  vmm_single_handles& operator=(vmm_single_handles const&) = delete;
  /// Synchronizes the device and releases everything, live allocations included.
  ~vmm_single_handles();

  /// See the top of this file. Throws logic_error for 0 bytes, out_of_memory when the device has
  /// too little, cuda_error for other driver refusals; nothing is left behind.
  [[nodiscard]] void* allocate(std::size_t bytes);
  /// Frees the live allocation at `ptr` (see the top of this file) and returns the size it was
  /// asked for, for the caller's size check; empty when `ptr` is not one (nothing happens).
  [[nodiscard]] std::optional<std::size_t> deallocate(void* ptr, cudaStream_t stream) noexcept;
  /// A new POSIX file descriptor for the handle of the live allocation at `ptr` (the caller owns
  /// it), and the allocation's mapped size. logic_error when `ptr` is not one.
  [[nodiscard]] std::pair<int, std::size_t> export_fd(void const* ptr) const;
  /// Releases the freed allocations whose streams have passed the free (`wait`: all of them,
  /// synchronizing where needed). Returns the bytes released.
  std::size_t release_passed(bool wait) noexcept;

  /// Live and waiting allocations (a relaxed read: a hint for the pool's deallocate path).
  [[nodiscard]] std::size_t count() const noexcept
  {
    return count_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::size_t mapped_bytes() const;
  void check() const;

 private:
  struct allocation {
    std::size_t bytes{};      // mapped (a multiple of the granularity)
    std::size_t requested{};  // what the caller asked for
    vmm_handle handle{};
  };
  struct waiting {
    char* ptr{};
    allocation a;
    cudaEvent_t event{};  // null: no event could be recorded; wait for a device synchronization
  };

  void destroy(char* ptr, allocation const& a) noexcept;
  [[nodiscard]] bool passed(waiting const& w, bool wait) noexcept;

  runtime* runtime_;
  std::vector<int> devices_;  // given access; the first owns the memory
  std::size_t granularity_;
  vmm_handle_properties properties_;  // every handle's (shareable)
  mutable std::mutex mutex_;
  std::map<char*, allocation> live_;  // guarded by mutex_
  std::vector<waiting> waiting_;      // guarded by mutex_
  std::atomic<std::size_t> count_{};  // == live_.size() + waiting_.size()
};

/// A handle mapped whole in a reservation of its own (aligned to `alignment`), with read-write
/// access for each of `devices`; a failure undoes the reservation and the mapping (the handle
/// stays the caller's). unmap_whole undoes it.
[[nodiscard]] void* map_whole(runtime& rt, vmm_handle handle, std::size_t bytes,
                              std::size_t alignment, std::span<int const> devices);
void unmap_whole(runtime& rt, void* ptr, std::size_t bytes) noexcept;

}  // namespace gpumem::detail
