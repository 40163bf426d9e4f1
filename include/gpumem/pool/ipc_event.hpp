// gpumem/pool/ipc_event.hpp — an owned CUDA event that can be shared with another process
// (cudaEventInterprocess | cudaEventDisableTiming), used to order the two processes' streams:
// "the allocation is ready" (exporter -> importer) and "the importer has freed" (importer ->
// exporter). Move-only; the destructor destroys the event.
//
// An opened event refers to the creator's event: the creating process must keep its ipc_event
// alive until every other process is done waiting on it.
#pragma once

#include <gpumem/cuda_stream_view.hpp>

#include <array>
#include <cstddef>

namespace gpumem {

/// The 64 opaque bytes of cudaIpcEventHandle_t; send them by any means.
struct ipc_event_handle {
  std::array<std::byte, 64> bytes{};
};

class ipc_event {
 public:
  /// A new interprocess event (cuda_error on failure).
  [[nodiscard]] static ipc_event create();
  /// Opens an event another process created and shared (cuda_error names a bad handle).
  [[nodiscard]] static ipc_event open(ipc_event_handle const& handle);

  ipc_event(ipc_event&& other) noexcept;
  ipc_event& operator=(ipc_event&& other) noexcept;
  ipc_event(ipc_event const&)            = delete;
  ipc_event& operator=(ipc_event const&) = delete;
  ~ipc_event();

  /// The handle to send to other processes.
  [[nodiscard]] ipc_event_handle handle() const;
  /// Captures the work enqueued on `stream` so far.
  void record(cuda_stream_view stream) const;
  /// Work enqueued on `stream` after this call waits for the recorded work.
  void make_wait(cuda_stream_view stream) const;
  void synchronize() const;
  [[nodiscard]] cudaEvent_t get() const noexcept { return event_; }

 private:
  explicit ipc_event(cudaEvent_t event) noexcept : event_{event} {}
  cudaEvent_t event_{};
};

}  // namespace gpumem
