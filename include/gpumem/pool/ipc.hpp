// gpumem/pool/ipc.hpp — sharing pools and single allocations between processes.
//
// Two phases. (1) The exporter creates an IPC-capable memory_pool, export_handle()s it and sends
// the handle (a descriptor: send_with_fd); the importer builds an imported_memory_pool from it. (2)
// The exporter allocates an exported_allocation, sends its export_data() and an ipc_event recorded
// after the allocation; the importer import_pointer()s it and waits on that event.
//
// Free ordering, the rule CUDA requires: every importer frees first, the exporter last.
//   * imported_allocation::free_async(stream, freed) frees and records `freed` in one call, so the
//     importer cannot free without producing the signal the exporter needs.
//   * exported_allocation, once its export_data() has been taken, can only be freed by
//     free_after(importer_freed_event, stream), which makes the stream wait for the importer's
//     free first. Its destructor never frees shared memory behind the importers' backs: a shared
//     allocation that was not freed with free_after is leaked (with a warning on stderr) rather
//     than risk a use-after-free in another process.
//   * imported_memory_pool cannot allocate and does not convert to memory_pool_ref.
// Processes cannot be forced by types; a process that ignores the signal (e.g. exits without
// freeing) still leaves the exporter waiting on an event that was never recorded, which CUDA treats
// as complete. Keep the protocol in one place (see docs/pools.md).
#pragma once

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/pool/ipc_event.hpp>
#include <gpumem/pool/memory_pool.hpp>
#include <gpumem/pool/pool_access.hpp>
#include <gpumem/pool/pool_attributes.hpp>
#include <gpumem/pool/shareable_pool_handle.hpp>

#include <array>
#include <cstddef>
#include <optional>

namespace gpumem::pools {

/// The 64 opaque bytes identifying one allocation of an exported pool (cudaMemPoolPtrExportData).
/// Not a handle: it carries no rights and may be sent by any means.
struct pointer_export_data {
  std::array<std::byte, 64> bytes{};
};

class imported_allocation;

/// The export data of any live allocation of an IPC-capable pool that was shared
/// (memory_pool::export_handle) — memory from memory_pool_ref::allocate, from a
/// cuda_async_memory_resource created with an export handle type, or from cudaMallocAsync. The
/// allocation stays the caller's: free it only after every importer freed it (see above).
/// Throws logic_error when `ptr` is not memory of a stream-ordered pool, cuda_error (saying why)
/// when CUDA refuses it, e.g. because its pool is not IPC-capable or not shared yet.
[[nodiscard]] pointer_export_data export_pointer(void const* ptr,
                                                 gpumem::runtime& rt = gpumem::cuda_device());

/// A pool imported from another process. Owning, move-only; importing the same pool again in one
/// process gives the same CUDA handle, destroyed with the last imported_memory_pool holding it.
/// Cannot allocate (CUDA forbids it):
/// there is no allocate member and no conversion to memory_pool_ref. Initially accessible only
/// from its resident device; the exporter's access settings are not inherited.
class imported_memory_pool {
 public:
  /// Imports `handle`. Throws logic_error for an empty descriptor or a handle type that is not
  /// posix_file_descriptor or fabric, cuda_error naming the handle when CUDA refuses it. The
  /// pool's home device is found right away, in this process's device numbering (the only device
  /// with access to a freshly imported pool). When CUDA does not tell (the home device is not
  /// visible here, e.g. under CUDA_VISIBLE_DEVICES), location() is empty: the home is unknown and
  /// set_access leaves the decision to CUDA (no peer-capability check of ours).
  explicit imported_memory_pool(shareable_pool_handle const& handle,
                                gpumem::runtime& rt = gpumem::cuda_device());
  /// Imports `handle` of a pool whose memory lives at `home`, a location in *this* process's
  /// numbering. The exporter's memory_pool::location() is in the exporter's numbering, which is
  /// the same only when both processes see the same devices (same CUDA_VISIBLE_DEVICES); prefer
  /// the constructor above. `pool_location::none()` means "home unknown" (as above). Throws
  /// logic_error, after releasing the import, when `home` is a device that does not exist here or
  /// is not where CUDA says the pool's memory is.
  imported_memory_pool(shareable_pool_handle const& handle, pool_location home,
                       gpumem::runtime& rt = gpumem::cuda_device());
  imported_memory_pool(imported_memory_pool&& other) noexcept;
  imported_memory_pool& operator=(imported_memory_pool&& other) noexcept;
  imported_memory_pool(imported_memory_pool const&)            = delete;
  imported_memory_pool& operator=(imported_memory_pool const&) = delete;
  ~imported_memory_pool();

  [[nodiscard]] cudaMemPool_t handle() const noexcept { return pool_; }
  /// Where the pool's memory lives (this process's numbering); empty when unknown (see the
  /// constructors).
  [[nodiscard]] std::optional<pool_location> location() const noexcept { return home_; }

  /// Statistics only (they reflect this process's imports); reuse policies mean nothing here.
  /// Seen on driver 580 (CUDA 13.0): the driver refuses these queries on imported pools with
  /// cudaErrorInvalidValue, so expect cuda_error there.
  template <pool_statistic A>
  [[nodiscard]] typename A::value_type get() const
  {
    return detail::pool_get<A>(*runtime_, pool_);
  }
  [[nodiscard]] pool_usage_statistics usage_statistics() const
  {
    return detail::pool_statistics(*runtime_, pool_);
  }
  /// Gives `device` access to the imported memory. With a known home, peer capability with it is
  /// checked first (cuda_error(cudaErrorPeerAccessUnsupported) when missing) and the home's own
  /// read-write entry is left alone; with an unknown home every entry goes to CUDA as given, and
  /// a refusal is CUDA's (cuda_error). Access is this process's: the exporter's grants are not
  /// inherited.
  void set_access(cuda_device_id device, access_flags flags = access_flags::read_write) const;
  [[nodiscard]] access_flags access(cuda_device_id device) const
  {
    return detail::get_pool_access(*runtime_, pool_, device);
  }

  /// Maps the allocation `data` describes. Does not wait for it to be ready: make the using
  /// stream wait on the exporter's ready event first. Throws cuda_error naming bad data.
  [[nodiscard]] imported_allocation import_pointer(pointer_export_data const& data,
                                                   std::size_t bytes) const;

 private:
  void destroy() noexcept;
  cudaMemPool_t pool_{};
  std::optional<pool_location> home_;
  gpumem::runtime* runtime_;
};

/// An allocation mapped from another process. Owning, move-only; freed first (before the
/// exporter frees). Prefer free_async(stream, freed); the destructor of an unfreed allocation
/// synchronizes the device and frees it (cudaFree), which is safe but slow and signals nobody.
class imported_allocation {
 public:
  imported_allocation(imported_allocation&& other) noexcept;
  imported_allocation& operator=(imported_allocation&& other) noexcept;
  imported_allocation(imported_allocation const&)            = delete;
  imported_allocation& operator=(imported_allocation const&) = delete;
  ~imported_allocation();

  [[nodiscard]] void* get() const noexcept { return ptr_; }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }
  /// Frees on `stream` (after the work enqueued there) and records `freed` right after the free,
  /// for the exporter's free_after. Then the allocation is empty.
  void free_async(cuda_stream_view stream, ipc_event const& freed);

 private:
  friend class imported_memory_pool;
  imported_allocation(void* ptr, std::size_t bytes, gpumem::runtime& rt) noexcept
      : ptr_{ptr}, bytes_{bytes}, runtime_{&rt}
  {
  }
  void* ptr_{};
  std::size_t bytes_{};
  gpumem::runtime* runtime_;
};

/// An allocation from an IPC-capable memory_pool, meant to be imported elsewhere. Owning,
/// move-only. The pool must outlive it and must not be moved while it lives (it is referenced).
class exported_allocation {
 public:
  /// `bytes` from `pool` on `stream`. logic_error if the pool is not IPC-capable.
  exported_allocation(memory_pool const& pool, std::size_t bytes, cuda_stream_view stream);
  exported_allocation(exported_allocation&& other) noexcept;
  exported_allocation& operator=(exported_allocation&& other) noexcept;
  exported_allocation(exported_allocation const&)            = delete;
  exported_allocation& operator=(exported_allocation const&) = delete;
  ~exported_allocation();

  [[nodiscard]] void* get() const noexcept { return ptr_; }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }
  /// True once export_data() was taken: only free_after may free it from then on.
  [[nodiscard]] bool shared() const noexcept { return shared_; }

  /// The data an importer needs; marks the allocation shared. Share the pool first
  /// (memory_pool::export_handle): on driver 580 cudaMemPoolExportPointer refused
  /// (cudaErrorInvalidValue) an allocation of a pool that had not been exported yet, and the
  /// cuda_error then says so.
  [[nodiscard]] pointer_export_data export_data();
  /// Frees on `stream` after `importer_freed` (the importer's free_async event): the stream waits
  /// for it, then the free is enqueued.
  void free_after(ipc_event const& importer_freed, cuda_stream_view stream);
  /// Frees an allocation that was never shared; logic_error if it was (use free_after).
  void free_unshared(cuda_stream_view stream);

 private:
  memory_pool const* pool_{};
  void* ptr_{};
  std::size_t bytes_{};
  cudaStream_t stream_{};
  bool shared_{false};
};

}  // namespace gpumem::pools

// The earlier spellings: each name is also gpumem::<name> (the same entity).
namespace gpumem {
using pools::export_pointer;
using pools::exported_allocation;
using pools::imported_allocation;
using pools::imported_memory_pool;
using pools::pointer_export_data;
}  // namespace gpumem
