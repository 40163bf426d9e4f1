// gpumem/runtime/metered_runtime.hpp — a runtime that forwards to another and meters the memory
// taken through it: bytes held now and at peak, and the address ranges held (the "chunks"), so that
// the replayer can measure a stack's footprint and lay out its free space without knowing the
// resources. Every other call forwards unchanged. An observer may be told of every chunk taken or
// given back (the replayer records the layout at the peak from these, see src/replay).
//
// Virtual memory: physical handles count as held from creation to release; their mappings are
// chunks (the address ranges that are backed).
//
// Driver calls (count_driver_calls(true)): each call of the kinds in driver_calls.hpp is counted
// and timed (host time inside the call). Off by default: a stack whose every allocation calls the
// runtime (cudaMallocFromPoolAsync) would pay two clock reads per call; off, one relaxed load.
//
// Invariant: held_bytes() == bytes allocated + bytes of live physical handles <= peak_held_bytes();
// chunks() == allocations + mappings (so, when every handle is mapped once, held_bytes() == the
// sum of the chunk sizes).
// Thread safety: all members are thread-safe (one mutex; upstream calls are slow paths).
#pragma once

#include <gpumem/detail/forwarding_runtime.hpp>
#include <gpumem/runtime/driver_calls.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace gpumem::trace {

/// Told of each chunk a metered_runtime hands out or takes back, on the calling thread, under the
/// meter's lock (so: quick, and never calling the meter).
class chunk_observer {
 public:
  virtual void chunk_added(std::uintptr_t address, std::size_t bytes) noexcept   = 0;
  virtual void chunk_removed(std::uintptr_t address, std::size_t bytes) noexcept = 0;

 protected:
  ~chunk_observer() = default;
};

class metered_runtime final : public detail::forwarding_runtime {
 public:
  explicit metered_runtime(gpumem::runtime& inner) : forwarding_runtime{inner} {}

  /// Lock-free: the replay hot loop reads it after every event.
  [[nodiscard]] std::size_t held_bytes() const noexcept
  {
    return held_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::size_t peak_held_bytes() const;
  /// Starts a new peak at what is held now.
  void reset_peak();
  /// Held ranges, address-ordered: (address, bytes).
  [[nodiscard]] std::vector<std::pair<std::uintptr_t, std::size_t>> chunks() const;
  [[nodiscard]] std::size_t chunk_count() const;
  /// True once the stack mapped virtual memory (its chunks are mappings, and touching mappings
  /// are contiguous addresses the stack may hand out as one block).
  [[nodiscard]] bool maps_memory() const noexcept { return maps_.load(std::memory_order_relaxed); }
  /// Sets the one observer (nullptr: none); it must outlive its registration.
  void observe(chunk_observer* observer);
  /// Starts (or stops) counting and timing driver calls (see the top of this file).
  void count_driver_calls(bool on) noexcept { counting_.store(on, std::memory_order_relaxed); }
  [[nodiscard]] bool counts_driver_calls() const noexcept
  {
    return counting_.load(std::memory_order_relaxed);
  }
  /// The calls counted so far (all zero unless counting was on).
  [[nodiscard]] driver_call_counts driver_calls() const noexcept;

  // The calls that take or give back memory are counted; every other call is passed on.
  [[nodiscard]] void* allocate(gpumem::memory_kind kind, std::size_t bytes) override;
  void free(gpumem::memory_kind kind, void* ptr) noexcept override;
  [[nodiscard]] gpumem::vmm_handle vmm_create(std::size_t bytes, int device,
                                              gpumem::vmm_handle_properties properties) override;
  void vmm_release(gpumem::vmm_handle handle) noexcept override;
  void vmm_map(void* ptr, std::size_t bytes, gpumem::vmm_handle handle) override;
  void vmm_unmap(void* ptr, std::size_t bytes) noexcept override;
  // Counted only.
  bool vmm_unmap_run(void* ptr, std::size_t bytes) noexcept override;
  void vmm_set_access(void* ptr, std::size_t bytes, int device) override;
  void* vmm_reserve(std::size_t bytes, std::size_t alignment) override;
  void vmm_unreserve(void* base, std::size_t bytes) noexcept override;
  std::size_t vmm_granularity(int device) override;
  cudaError_t malloc_from_pool_async(void** ptr, std::size_t bytes, cudaMemPool_t pool,
                                     cudaStream_t stream) noexcept override;
  cudaError_t free_async(void* ptr, cudaStream_t stream) noexcept override;
  cudaError_t mem_pool_trim_to(cudaMemPool_t pool, std::size_t keep) noexcept override;
  cudaEvent_t event_create() override;
  void event_destroy(cudaEvent_t event) noexcept override;
  void event_record(cudaEvent_t event, cudaStream_t stream) override;
  bool event_query(cudaEvent_t event) override;
  void event_synchronize(cudaEvent_t event) override;
  void stream_wait_event(cudaStream_t stream, cudaEvent_t event) override;
  void stream_synchronize(cudaStream_t stream) override;
  void device_synchronize() override;
  bool stream_capturing(cudaStream_t stream) override;  // counted as `other`
  void memcpy_async(void* dst, void const* src, std::size_t bytes, cudaStream_t stream) override;
  void memset_async(void* dst, int value, std::size_t bytes, cudaStream_t stream) override;

 private:
  /// Counts and times one call (from construction to destruction) while counting is on.
  class call_scope {
   public:
    call_scope(metered_runtime& m, driver_call k) noexcept;
    ~call_scope();
    call_scope(call_scope const&)            = delete;
    call_scope& operator=(call_scope const&) = delete;

   private:
    metered_runtime* meter_;  // null: not counting
    driver_call kind_;
    std::uint64_t start_{};
  };

  void add_chunk(std::uintptr_t address, std::size_t bytes);  // mutex_ held
  void remove_chunk(std::uintptr_t address) noexcept;         // mutex_ held

  mutable std::mutex mutex_;
  std::map<std::uintptr_t, std::size_t> chunks_;
  std::atomic<std::size_t> held_{};
  std::atomic<bool> maps_{
      false};  ///< vmm_map was called  ///< written under mutex_, read without it
  std::size_t peak_{};
  chunk_observer* observer_{};
  std::map<gpumem::vmm_handle, std::size_t> handles_;  // live physical handles -> bytes
  std::atomic<bool> counting_{false};
  std::array<std::atomic<std::uint64_t>, driver_call_kinds> calls_{};  // per driver_call
  std::array<std::atomic<std::uint64_t>, driver_call_kinds> nanoseconds_{};
};

}  // namespace gpumem::trace
