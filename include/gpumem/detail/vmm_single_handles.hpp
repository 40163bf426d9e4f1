// gpumem/detail/vmm_single_handles.hpp — allocations that are each one physical handle mapped
// once in an address range of its own, created exportable as a POSIX file descriptor (not API;
// the virtual-memory pool's allocate_single_handle). For memory sent to another process or
// registered for RDMA / NCCL, where a buffer must be one physical allocation that holds nothing
// else.
//
// allocate(bytes)     reserves, creates (shareable), maps and grants access; a failure at any step
//                     undoes the steps before it.
// deallocate(p, n, S) is stream-ordered: the allocation waits, behind an event recorded on S, until
//                     S has passed the free; release_passed() then unmaps and releases it. When no
//                     event can be recorded, S is synchronized instead (and failing that, the
//                     allocation waits for release_passed(true), which synchronizes the device).
//
// Invariants (check()): every live or waiting allocation is one whole mapping of its own handle
// in its own reservation, `bytes` a multiple of the granularity; count() == live + waiting;
// mapped_bytes() == sum of their bytes.
// Thread safety: every member may be called from any thread (one mutex; driver calls are made
// under it: these are slow paths by nature). count() is a relaxed atomic read.
#pragma once

#include <gpumem/align.hpp>
#include <gpumem/detail/runtime.hpp>

#include <atomic>
#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

namespace gpumem::detail {

class vmm_single_handles {
 public:
  /// `device` owns the memory; `peers` get read-write access too.
  vmm_single_handles(runtime& rt, int device, std::vector<int> peers, std::size_t granularity);
  vmm_single_handles(vmm_single_handles const&)            = delete;
  vmm_single_handles& operator=(vmm_single_handles const&) = delete;
  /// Synchronizes the device and releases everything, live allocations included.
  ~vmm_single_handles();

  /// See the top of this file. Throws logic_error for 0 bytes, out_of_memory when the device has
  /// too little, cuda_error for other driver refusals; nothing is left behind.
  [[nodiscard]] void* allocate(std::size_t bytes);
  /// False when `ptr` is not a live allocation of this object (nothing happens). A size that
  /// differs from the allocation's is passed to `bad_size` (the allocation is freed all the same).
  template <class OnBadSize>
  bool deallocate(void* ptr, std::size_t bytes, cudaStream_t stream, OnBadSize&& bad_size) noexcept;
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

  [[nodiscard]] bool free_located(void* ptr, std::size_t bytes, cudaStream_t stream,
                                  std::size_t& requested) noexcept;
  void destroy(char* ptr, allocation const& a) noexcept;
  [[nodiscard]] bool passed(waiting const& w, bool wait) noexcept;

  runtime* runtime_;
  int device_;
  std::vector<int> peers_;
  std::size_t granularity_;
  mutable std::mutex mutex_;
  std::map<char*, allocation> live_;  // guarded by mutex_
  std::vector<waiting> waiting_;      // guarded by mutex_
  std::atomic<std::size_t> count_{};  // == live_.size() + waiting_.size()
};

template <class OnBadSize>
bool vmm_single_handles::deallocate(void* ptr, std::size_t bytes, cudaStream_t stream,
                                    OnBadSize&& bad_size) noexcept
{
  std::size_t requested{};
  if (!free_located(ptr, bytes, stream, requested)) { return false; }
  if (!can_align_up(bytes, 256) || align_up(bytes, 256) != align_up(requested, 256)) {
    bad_size(requested);
  }
  return true;
}

}  // namespace gpumem::detail
