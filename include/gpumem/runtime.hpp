// gpumem/runtime.hpp — the runtime seam: everything gpumem asks of CUDA, as one interface.
//
// Every resource takes a `gpumem::runtime&` as its last constructor argument (default:
// cuda_device(), the real CUDA runtime of this process). The other implementation is
// gpumem::simulated_device (<gpumem/simulated_device.hpp>), which models device memory, streams,
// events, memory pools and virtual memory on the host, deterministically, so that programs and
// tests drive the same resource code without a GPU. A program may also implement it (to count or
// fail calls, for instance), usually by forwarding to one of the two.
// gpumem's suballocators call it on slow paths only: their allocate hit paths never do. The
// driver's pool resources (memory_pool_ref, cuda_async_*, current_pool) call it once per
// allocation and free, where they would call CUDA anyway. (The pool calls return CUDA's status,
// not throw.)
//
// Thread safety: every member may be called from any thread.
// Errors: allocate throws out_of_memory (memory exhausted) or cuda_error; free and
// event_destroy never throw; other members throw cuda_error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace gpumem {

/// What kind of memory a leaf allocation is.
enum class memory_kind {
  device,       ///< cudaMalloc
  managed,      ///< cudaMallocManaged (unified memory)
  pinned_host,  ///< cudaHostAlloc / cudaMallocHost
};

[[nodiscard]] char const* to_string(memory_kind kind) noexcept;

struct mem_info {
  std::size_t free_bytes{};
  std::size_t total_bytes{};
};

/// Where unified memory should live or be prefetched to: a device ordinal, or the host.
struct mem_location {
  static constexpr int host = -1;
  int device{host};
};

/// A physical allocation of the virtual-memory API (CUmemGenericAllocationHandle).
using vmm_handle = unsigned long long;

/// How a physical allocation is made, beyond its size and device (CUmemAllocationProp's fields).
struct vmm_handle_properties {
  /// Exportable as a POSIX file descriptor (requestedHandleTypes =
  /// CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR): needed to send it to another process, and by
  /// NCCL's user-buffer registration.
  bool shareable{};
  /// GPUDirect RDMA capable (allocFlags.gpuDirectRDMACapable): network adapters may read and
  /// write it directly. Only where vmm_gpu_direct_rdma_supported(device).
  bool gpu_direct_rdma{};
  friend bool operator==(vmm_handle_properties const&, vmm_handle_properties const&) = default;
};

/// The physical allocation mapped at an address, as the driver describes it.
struct vmm_allocation_info {
  void* base{};         ///< where its mapping starts
  std::size_t bytes{};  ///< its size (the mapping's length)
  int device{};         ///< the device it lives on
  vmm_handle_properties properties;
};

class runtime {
 public:
  runtime()                          = default;
  runtime(runtime const&)            = delete;
  runtime& operator=(runtime const&) = delete;
  virtual ~runtime()                 = default;

  /// "cuda" or "host" — for diagnostics.
  [[nodiscard]] virtual char const* name() const noexcept = 0;

  // -- memory ------------------------------------------------------------------------------
  /// At least `bytes` (> 0) bytes of `kind` memory, 256-byte aligned.
  [[nodiscard]] virtual void* allocate(memory_kind kind, std::size_t bytes) = 0;
  virtual void free(memory_kind kind, void* ptr) noexcept                   = 0;
  /// Free and total device memory of the current device.
  [[nodiscard]] virtual mem_info memory_info() = 0;
  /// Migrates unified memory to `where` on `stream` (no-op where the runtime cannot).
  virtual void prefetch(void const* ptr, std::size_t bytes, mem_location where,
                        cudaStream_t stream) = 0;
  /// Sets the preferred location of unified or system memory.
  virtual void advise_preferred_location(void const* ptr, std::size_t bytes,
                                         mem_location where) = 0;

  // -- devices -----------------------------------------------------------------------------
  [[nodiscard]] virtual int current_device()                                  = 0;
  virtual void set_device(int device)                                         = 0;
  [[nodiscard]] virtual int device_count() noexcept                           = 0;
  [[nodiscard]] virtual int device_attribute(cudaDeviceAttr attr, int device) = 0;

  // -- events and streams -------------------------------------------------------------------
  /// A new event with timing disabled.
  [[nodiscard]] virtual cudaEvent_t event_create()       = 0;
  virtual void event_destroy(cudaEvent_t event) noexcept = 0;
  /// Captures all work enqueued on `stream` so far.
  virtual void event_record(cudaEvent_t event, cudaStream_t stream) = 0;
  /// True when all work the event captured has completed.
  [[nodiscard]] virtual bool event_query(cudaEvent_t event) = 0;
  virtual void event_synchronize(cudaEvent_t event)         = 0;
  /// Work enqueued on `stream` after this call waits for `event`.
  virtual void stream_wait_event(cudaStream_t stream, cudaEvent_t event) = 0;
  virtual void stream_synchronize(cudaStream_t stream)                   = 0;
  virtual void device_synchronize()                                      = 0;
  /// True when `stream` is being captured into a CUDA graph, or when a capture forbids it now
  /// (the legacy default stream during a global-mode capture of another stream): an event record
  /// or wait on it would fail and break the capture (cudaStreamIsCapturing). Not pure: a runtime
  /// that cannot tell says false.
  [[nodiscard]] virtual bool stream_capturing(cudaStream_t stream);
  /// Copies `bytes` from `src` to `dst` on `stream` (cudaMemcpyAsync, direction from the pointers:
  /// device, pinned or pageable host memory). Throws cuda_error when a range is not accessible
  /// (e.g. device address space with nothing mapped). Not pure: a runtime that cannot copy
  /// throws cuda_error (cudaErrorNotSupported), so runtimes written before it still build.
  virtual void memcpy_async(void* dst, void const* src, std::size_t bytes, cudaStream_t stream);
  /// Sets `bytes` bytes at `dst` to `value` on `stream` (cudaMemsetAsync). Throws cuda_error as
  /// memcpy_async does; not pure either.
  virtual void memset_async(void* dst, int value, std::size_t bytes, cudaStream_t stream);

  // -- virtual memory (the driver's cuMem* API; the virtual-memory pool's slow paths) ----------
  /// The device's recommended mapping granularity in bytes. Throws cuda_error naming the
  /// attribute when the device has no virtual memory management.
  [[nodiscard]] virtual std::size_t vmm_granularity(int device) = 0;
  /// Reserves `bytes` (a multiple of the granularity) of device address space; nothing is backed.
  [[nodiscard]] virtual void* vmm_reserve(std::size_t bytes, std::size_t alignment) = 0;
  /// Gives a whole reservation back (every mapping in it must be gone).
  virtual void vmm_unreserve(void* base, std::size_t bytes) noexcept = 0;
  /// `bytes` (a multiple of the granularity) of physical memory on `device`, made with
  /// `properties`; out_of_memory when the device has too little.
  [[nodiscard]] virtual vmm_handle vmm_create(std::size_t bytes, int device,
                                              vmm_handle_properties properties) = 0;
  /// Whether `device` can make GPUDirect RDMA capable physical allocations
  /// (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED). Not pure: default false.
  [[nodiscard]] virtual bool vmm_gpu_direct_rdma_supported(int device);
  /// The physical allocation mapped at `ptr` (any address inside its mapping): its mapping's start
  /// and length, device and properties (cuMemRetainAllocationHandle,
  /// cuMemGetAllocationPropertiesFromHandle, cuMemGetAddressRange). Throws cuda_error when nothing
  /// is mapped there. Not pure: default throws cuda_error (cudaErrorNotSupported).
  [[nodiscard]] virtual vmm_allocation_info vmm_allocation_at(void const* ptr);
  /// Frees the physical memory once no mapping uses it.
  virtual void vmm_release(vmm_handle handle) noexcept = 0;
  /// Maps all of `handle` (`bytes` long) at `ptr`, inside a reservation and over no other
  /// mapping. Nothing may access it before vmm_set_access.
  virtual void vmm_map(void* ptr, std::size_t bytes, vmm_handle handle) = 0;
  /// Removes the mapping made at `ptr` (`bytes` must be its whole length).
  virtual void vmm_unmap(void* ptr, std::size_t bytes) noexcept = 0;
  /// Removes every mapping of [ptr, ptr + bytes) — whole mappings, side by side — in one call
  /// where the runtime can. False: nothing was changed (unmap them one by one). Default: false.
  virtual bool vmm_unmap_run(void* ptr, std::size_t bytes) noexcept;
  /// Grants `device` read-write access to a mapped range (one or several whole mappings).
  virtual void vmm_set_access(void* ptr, std::size_t bytes, int device) = 0;
  /// A new POSIX file descriptor for a shareable handle (the caller closes it).
  [[nodiscard]] virtual int vmm_export_fd(vmm_handle handle) = 0;
  /// A new handle to the physical memory another handle exported as the POSIX file descriptor
  /// `fd` (possibly in another process); `fd` stays the caller's. Release it like any handle.
  [[nodiscard]] virtual vmm_handle vmm_import_fd(int fd) = 0;

  // -- memory pools (the stream-ordered allocator) ---------------------------------------------
  // Each mirrors the CUDA runtime call it names, arguments and result included, and returns
  // CUDA's status (never throws): the pool API (src/pool) turns statuses into its own errors.
  [[nodiscard]] virtual int driver_version() noexcept                                       = 0;
  virtual cudaError_t mem_pool_create(cudaMemPool_t* pool,
                                      cudaMemPoolProps const* props) noexcept               = 0;
  virtual cudaError_t mem_pool_destroy(cudaMemPool_t pool) noexcept                         = 0;
  virtual cudaError_t mem_pool_set_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                             void* value) noexcept                          = 0;
  virtual cudaError_t mem_pool_get_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                             void* value) noexcept                          = 0;
  virtual cudaError_t mem_pool_set_access(cudaMemPool_t pool, cudaMemAccessDesc const* list,
                                          std::size_t count) noexcept                       = 0;
  virtual cudaError_t mem_pool_get_access(cudaMemAccessFlags* flags, cudaMemPool_t pool,
                                          cudaMemLocation* location) noexcept               = 0;
  virtual cudaError_t mem_pool_trim_to(cudaMemPool_t pool, std::size_t keep) noexcept       = 0;
  virtual cudaError_t malloc_from_pool_async(void** ptr, std::size_t bytes, cudaMemPool_t pool,
                                             cudaStream_t stream) noexcept                  = 0;
  virtual cudaError_t free_async(void* ptr, cudaStream_t stream) noexcept                   = 0;
  virtual cudaError_t device_get_default_mem_pool(cudaMemPool_t* pool, int device) noexcept = 0;
  virtual cudaError_t device_get_mem_pool(cudaMemPool_t* pool, int device) noexcept         = 0;
  virtual cudaError_t device_set_mem_pool(int device, cudaMemPool_t pool) noexcept          = 0;
  virtual cudaError_t mem_pool_export_to_shareable_handle(
      void* handle, cudaMemPool_t pool, cudaMemAllocationHandleType type) noexcept = 0;
  virtual cudaError_t mem_pool_import_from_shareable_handle(
      cudaMemPool_t* pool, void* handle, cudaMemAllocationHandleType type) noexcept    = 0;
  virtual cudaError_t mem_pool_export_pointer(cudaMemPoolPtrExportData* data,
                                              void* ptr) noexcept                      = 0;
  virtual cudaError_t mem_pool_import_pointer(void** ptr, cudaMemPool_t pool,
                                              cudaMemPoolPtrExportData* data) noexcept = 0;
  virtual cudaError_t device_can_access_peer(int* can, int device, int peer) noexcept  = 0;
  virtual cudaError_t stream_get_device(cudaStream_t stream, int* device) noexcept     = 0;
  /// The driver's pointer attributes of `ptr`: memory type (cudaMemoryType), device ordinal, pool,
  /// allocation range. Unknown pointers give cudaMemoryTypeUnregistered and cudaSuccess.
  virtual cudaError_t pointer_attributes(void const* ptr, cudaMemoryType* type, int* device,
                                         cudaMemPool_t* pool, void const** base,
                                         std::size_t* size) noexcept = 0;
};

namespace detail {
/// The process-wide CUDA runtime (stateless; never destroyed).
[[nodiscard]] runtime& cuda_runtime() noexcept;
}  // namespace detail

/// The real CUDA runtime of this process (the default runtime of every resource).
[[nodiscard]] inline runtime& cuda_device() noexcept
{
  return detail::cuda_runtime();
}

}  // namespace gpumem
