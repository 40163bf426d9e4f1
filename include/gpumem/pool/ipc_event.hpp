// gpumem/pool/ipc_event.hpp — an owned CUDA event that can be shared with another process
// (cudaEventInterprocess | cudaEventDisableTiming), used to order the two processes' streams:
// "the allocation is ready" (exporter -> importer) and "the importer has freed" (importer ->
// exporter). Move-only; the destructor destroys the event.
//
// An opened event refers to the creator's event: the creating process must keep its ipc_event
// alive until every other process is done waiting on it. An opened event belongs to the device
// that was current when it was opened: a stream of another device cannot wait on it (CUDA's driver
// crashes on such a wait; make_wait refuses it with a logic_error instead), so open it with the
// waiting stream's device current.
#pragma once

#include <gpumem/cuda_stream_view.hpp>

#include <array>
#include <cstddef>

namespace gpumem::pools {

/// The 64 opaque bytes of cudaIpcEventHandle_t; send them by any means.
struct ipc_event_handle {
  std::array<std::byte, 64> bytes{};
};

class ipc_event {
 public:
  /// A new interprocess event (cuda_error on failure).
  [[nodiscard]] static ipc_event create();
  /// Opens an event another process created and shared (cuda_error names a bad handle), on the
  /// current device: only streams of that device can wait on it.
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
  /// Work enqueued on `stream` after this call waits for the recorded work. For an opened event,
  /// `stream` must be on the device it was opened on (logic_error otherwise).
  void make_wait(cuda_stream_view stream) const;
  void synchronize() const;
  [[nodiscard]] cudaEvent_t get() const noexcept { return event_; }

 private:
  ipc_event(cudaEvent_t event, int opened_on) noexcept : event_{event}, opened_on_{opened_on} {}
  cudaEvent_t event_{};
  int opened_on_{-1};  ///< the device an opened event belongs to; -1 for one created here
};

}  // namespace gpumem::pools

// The earlier spellings: each name is also gpumem::<name> (the same entity).
namespace gpumem {
using pools::ipc_event;
using pools::ipc_event_handle;
}  // namespace gpumem
