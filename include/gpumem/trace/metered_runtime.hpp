// gpumem/trace/metered_runtime.hpp — a runtime that forwards to another and meters the memory taken
// through it: bytes held now and at peak, and the address ranges held (the "chunks"), so that the
// replayer can measure a stack's footprint and lay out its free space without knowing the
// resources. Every other call forwards unchanged. An observer may be told of every chunk taken or
// given back (the replayer records the layout at the peak from these, see src/trace).
//
// Invariant: held_bytes() == sum of the sizes in chunks() <= peak_held_bytes().
// Thread safety: all members are thread-safe (one mutex; upstream calls are slow paths).
#pragma once

#include <gpumem/detail/runtime.hpp>

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

class metered_runtime final : public detail::runtime {
 public:
  explicit metered_runtime(detail::runtime& inner) : inner_{&inner} {}

  [[nodiscard]] detail::runtime& inner() const noexcept { return *inner_; }
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
  /// Sets the one observer (nullptr: none); it must outlive its registration.
  void observe(chunk_observer* observer);

  [[nodiscard]] char const* name() const noexcept override { return inner_->name(); }
  [[nodiscard]] void* allocate(detail::memory_kind kind, std::size_t bytes) override;
  void free(detail::memory_kind kind, void* ptr) noexcept override;
  [[nodiscard]] detail::mem_info memory_info() override { return inner_->memory_info(); }
  void prefetch(void const* p, std::size_t n, detail::mem_location w, cudaStream_t s) override
  {
    inner_->prefetch(p, n, w, s);
  }
  void advise_preferred_location(void const* p, std::size_t n, detail::mem_location w) override
  {
    inner_->advise_preferred_location(p, n, w);
  }
  [[nodiscard]] int current_device() override { return inner_->current_device(); }
  void set_device(int device) override { inner_->set_device(device); }
  [[nodiscard]] int device_count() noexcept override { return inner_->device_count(); }
  [[nodiscard]] int device_attribute(cudaDeviceAttr a, int d) override
  {
    return inner_->device_attribute(a, d);
  }
  [[nodiscard]] cudaEvent_t event_create() override { return inner_->event_create(); }
  void event_destroy(cudaEvent_t e) noexcept override { inner_->event_destroy(e); }
  void event_record(cudaEvent_t e, cudaStream_t s) override { inner_->event_record(e, s); }
  [[nodiscard]] bool event_query(cudaEvent_t e) override { return inner_->event_query(e); }
  void event_synchronize(cudaEvent_t e) override { inner_->event_synchronize(e); }
  void stream_wait_event(cudaStream_t s, cudaEvent_t e) override
  {
    inner_->stream_wait_event(s, e);
  }
  void stream_synchronize(cudaStream_t s) override { inner_->stream_synchronize(s); }
  void device_synchronize() override { inner_->device_synchronize(); }

 private:
  detail::runtime* inner_;
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, std::size_t> chunks_;
  std::atomic<std::size_t> held_{};  ///< written under mutex_, read without it
  std::size_t peak_{};
  chunk_observer* observer_{};
};

}  // namespace gpumem::trace
