// gpumem/simulated_device.hpp — run resources over a simulated GPU, without one.
//
//   gpumem::simulated_device sim;                       // 80 GiB of simulated device memory
//   gpumem::mr::cuda_memory_resource cuda{sim};          // every resource takes a runtime
//   gpumem::mr::pool_memory_resource<gpumem::mr::cuda_memory_resource> pool{&cuda, 1 << 20,
//                                                                            std::nullopt, sim};
//
// Every resource takes the runtime it runs over as its last constructor argument (default: the
// real CUDA runtime, gpumem::cuda_device()). A simulated_device models device memory, streams
// and events on the host, deterministically: work put on a simulated stream (create_stream,
// enqueue) stays pending until complete() or complete_all(), so that stream-ordering behaviour
// can be tested and replayed on any machine. With `backed = false` its memory is address space
// only (nothing may be written to it), which is how the gpumem tool replays traces of any size.
//
// What it models of a GPU:
//  * device memory: either real host memory (`backed`, tests may read and write it) or a simulated
//    address space that hands out addresses and touches nothing (replay of traces larger than any
//    GPU). Capacity is enforced; exhaustion throws out_of_memory.
//  * streams: each has `enqueued` (work submitted) and `completed` (work done) positions. Tests
//    submit work with enqueue() and finish it with complete(), so "stream A has not yet reached
//    the free" is a state the test sets, not a race.
//  * events: record captures the stream's enqueued position; an event is ready when its stream has
//    completed past it. stream_wait_event adds a dependency: the waiting stream cannot complete
//    work enqueued after the wait until the event is ready. Synchronizing (event, stream, device)
//    models the host blocking until the GPU is done: it completes the work waited for.
//  * free() synchronizes the whole device, as cudaFree does.
//  * default streams: 0 and cudaStreamLegacy share one stream; cudaStreamPerThread is a distinct
//    stream for each host thread (as on the GPU).
//  * virtual memory: reservations, physical handles charged to
//    the same capacity as allocations, mappings, and the errors CUDA gives for misuse. In `backed`
//    mode reservations are real host address space that faults where nothing is mapped.
// With `auto_complete`, work completes the moment it is enqueued (the replay tool's mode).
//
// Invariants (checked by check_invariants()):
//   used_bytes == sum of live allocation sizes (rounded to granularity) + physical handle bytes
//                 + memory the memory pools reserve
//              <= capacity_bytes
//   for every stream: completed <= enqueued
// Thread safety: all members are thread-safe (one mutex; this is a slow-path object).
#pragma once

#include <gpumem/runtime.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace gpumem {

/// The runtime seam (<gpumem/runtime.hpp>), by its earlier name.
using device_runtime = runtime;

struct simulated_device_options {
  std::size_t capacity_bytes{std::size_t{80} << 30};  ///< modelled device memory (80 GiB)
  bool backed{true};                   ///< true: real host memory; false: simulated addresses only
  bool auto_complete{false};           ///< true: every stream completes its work immediately
  std::size_t granularity_bytes{256};  ///< each allocation's footprint is rounded up to this
  int device_count{1};
  std::size_t vmm_granularity_bytes{std::size_t{2} << 20};  ///< the virtual-memory granularity
  bool vmm_supported{true};  ///< false: the device reports no virtual memory management
  /// The devices can make GPUDirect RDMA capable physical allocations
  /// (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED); false: asking for one fails.
  bool vmm_gpu_direct_rdma{true};
  bool peer_access{true};  ///< every pair of distinct devices has peer capability
};

/// Counts of runtime calls, for tests that assert which paths reach the runtime.
struct simulated_device_calls {
  std::uint64_t allocate{};
  std::uint64_t free{};
  std::uint64_t event_create{};
  std::uint64_t event_record{};
  std::uint64_t event_query{};
  std::uint64_t stream_wait_event{};
  std::uint64_t synchronize{};  ///< event, stream and device synchronizations
  /// Streams that device-wide synchronizations (cudaFree, device and complete_all) had to
  /// complete; idle streams are not visited, so this grows with the work, not the stream count.
  std::uint64_t synchronize_visits{};
  std::uint64_t vmm_create{};
  std::uint64_t vmm_release{};
  std::uint64_t vmm_map{};
  std::uint64_t vmm_unmap{};
  std::uint64_t memcpy{};        ///< memcpy_async calls
  std::uint64_t memcpy_bytes{};  ///< bytes they copied
  std::uint64_t memset{};        ///< memset_async calls
};

/// The virtual-memory state of a simulated_device, for tests.
struct simulated_vmm_state {
  std::size_t physical_bytes{};  ///< live physical handles
  std::size_t mapped_bytes{};
  std::size_t handles{};
  std::size_t mappings{};
  std::size_t reservations{};
  std::uint64_t misuse_count{};  ///< misuse in calls that cannot throw (unmap, release, ...)
};

/// One advise_preferred_location call, as the stand-in recorded it.
struct simulated_device_advice {
  void const* ptr{};
  std::size_t bytes{};
  mem_location where{};
};

class simulated_device final : public runtime {
 public:
  explicit simulated_device(simulated_device_options options = {});
  ~simulated_device() override;

  // -- test controls -------------------------------------------------------------------------
  /// A new simulated stream (a cudaStream_t that only this runtime understands).
  [[nodiscard]] cudaStream_t create_stream();
  /// Submits `count` units of work (kernels) to `stream`; they stay pending until completed.
  void enqueue(cudaStream_t stream, std::uint64_t count = 1);
  /// The device finishes the work enqueued on `stream` so far, as far as its waits allow.
  void complete(cudaStream_t stream);
  /// Completes every stream (repeatedly, until no dependency blocks).
  void complete_all();
  [[nodiscard]] std::uint64_t enqueued(cudaStream_t stream);
  [[nodiscard]] std::uint64_t completed(cudaStream_t stream);
  /// Begins a global-mode capture of `stream` into a CUDA graph (cudaStreamBeginCapture, mode
  /// global; one at a time). Until end_capture, the calls CUDA forbids during such a capture from
  /// any thread — allocate, event_query, event/stream/device synchronization, and event record or
  /// wait on the legacy default stream — throw the cuda_error CUDA gives and invalidate the
  /// capture. Throws logic_error when a capture is already active.
  void begin_global_capture(cudaStream_t stream);
  /// Ends the capture of `stream`; false when a forbidden call invalidated it. Throws logic_error
  /// when `stream` is not being captured.
  [[nodiscard]] bool end_capture(cudaStream_t stream);
  /// The next `count` allocate() and vmm_create() calls fail with out_of_memory.
  void fail_next_allocations(std::size_t count);
  /// The next `count` allocate() and vmm_create() calls fail with `error`: out_of_memory for
  /// cudaErrorMemoryAllocation, cuda_error(error) for any other (e.g. cudaErrorInvalidValue, a
  /// failure that is not exhaustion). Pool allocations always fail as out of memory.
  void fail_next_allocations(std::size_t count, cudaError_t error);
  /// The next `count` vmm_map() calls fail with cuda_error.
  void fail_next_maps(std::size_t count);
  /// After `skip` more memcpy_async() calls succeed, the next `count` fail with cuda_error
  /// (nothing is copied).
  void fail_next_copies(std::size_t count, std::size_t skip = 0);
  [[nodiscard]] simulated_vmm_state vmm_state() const;
  /// Throws cuda_error unless [ptr, ptr + bytes) is wholly mapped and accessible.
  void vmm_check_mapped(void const* ptr, std::size_t bytes) const;
  [[nodiscard]] std::size_t used_bytes() const;
  [[nodiscard]] std::size_t peak_used_bytes() const;
  [[nodiscard]] std::size_t live_allocations() const;
  /// Events created and not yet destroyed.
  [[nodiscard]] std::size_t live_events() const;
  /// Memory pools created or imported and not yet gone (a destroyed pool lives on until its last
  /// allocation is freed); the default pools do not count.
  [[nodiscard]] std::size_t live_pools() const;
  [[nodiscard]] simulated_device_calls calls() const;
  /// The advise_preferred_location calls so far, in order (the first 4096; advice is only
  /// recorded).
  [[nodiscard]] std::vector<simulated_device_advice> advice() const;
  /// True when the virtual-memory mapping holding `ptr` was given access by `device`.
  [[nodiscard]] bool vmm_accessible_by(void const* ptr, int device) const;
  [[nodiscard]] simulated_device_options const& options() const noexcept;
  /// Throws logic_error naming the broken invariant.
  void check_invariants() const;

  // -- runtime ---------------------------------------------------------------------------------
  [[nodiscard]] char const* name() const noexcept override { return "host"; }
  [[nodiscard]] void* allocate(memory_kind kind, std::size_t bytes) override;
  void free(memory_kind kind, void* ptr) noexcept override;
  [[nodiscard]] mem_info memory_info() override;
  void prefetch(void const* ptr, std::size_t bytes, mem_location where,
                cudaStream_t stream) override;
  void advise_preferred_location(void const* ptr, std::size_t bytes, mem_location where) override;
  [[nodiscard]] int current_device() override;
  void set_device(int device) override;
  [[nodiscard]] int device_count() noexcept override;
  [[nodiscard]] int device_attribute(cudaDeviceAttr attr, int device) override;
  [[nodiscard]] cudaEvent_t event_create() override;
  void event_destroy(cudaEvent_t event) noexcept override;
  void event_record(cudaEvent_t event, cudaStream_t stream) override;
  [[nodiscard]] bool event_query(cudaEvent_t event) override;
  void event_synchronize(cudaEvent_t event) override;
  void stream_wait_event(cudaStream_t stream, cudaEvent_t event) override;
  void stream_synchronize(cudaStream_t stream) override;
  void device_synchronize() override;
  /// True for the stream being captured, and for the legacy default stream during any capture.
  [[nodiscard]] bool stream_capturing(cudaStream_t stream) override;
  /// Copies at once (as if the stream had reached the copy); in `backed` mode the bytes really
  /// move, simulated memory only checks. Throws cuda_error when a range lies in reserved address
  /// space that is not wholly mapped and accessible (CUDA refuses such a copy).
  void memcpy_async(void* dst, void const* src, std::size_t bytes, cudaStream_t stream) override;
  /// Sets at once, like memcpy_async: the bytes in `backed` mode, a check of the range otherwise.
  void memset_async(void* dst, int value, std::size_t bytes, cudaStream_t stream) override;
  [[nodiscard]] std::size_t vmm_granularity(int device) override;
  [[nodiscard]] void* vmm_reserve(std::size_t bytes, std::size_t alignment) override;
  void vmm_unreserve(void* base, std::size_t bytes) noexcept override;
  /// Records the properties each handle was made with (vmm_allocation_at tells them); cuda_error
  /// (invalid value) for gpu_direct_rdma where the options say the device cannot.
  [[nodiscard]] vmm_handle vmm_create(std::size_t bytes, int device,
                                      vmm_handle_properties properties) override;
  [[nodiscard]] bool vmm_gpu_direct_rdma_supported(int device) override;
  [[nodiscard]] vmm_allocation_info vmm_allocation_at(void const* ptr) override;
  void vmm_release(vmm_handle handle) noexcept override;
  void vmm_map(void* ptr, std::size_t bytes, vmm_handle handle) override;
  void vmm_unmap(void* ptr, std::size_t bytes) noexcept override;
  /// Unmaps whole adjacent mappings in one call (counted as one vmm_unmap); false, changing
  /// nothing, unless [ptr, ptr + bytes) is exactly such mappings.
  bool vmm_unmap_run(void* ptr, std::size_t bytes) noexcept override;
  void vmm_set_access(void* ptr, std::size_t bytes, int device) override;
  [[nodiscard]] int vmm_export_fd(vmm_handle handle) override;
  [[nodiscard]] vmm_handle vmm_import_fd(int fd) override;

  // Memory pools: a model of the stream-ordered allocator
  // (src/runtime/simulated/host_pool_model.hpp).
  [[nodiscard]] int driver_version() noexcept override;
  cudaError_t mem_pool_create(cudaMemPool_t* pool, cudaMemPoolProps const* props) noexcept override;
  cudaError_t mem_pool_destroy(cudaMemPool_t pool) noexcept override;
  cudaError_t mem_pool_set_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                     void* value) noexcept override;
  cudaError_t mem_pool_get_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                     void* value) noexcept override;
  cudaError_t mem_pool_set_access(cudaMemPool_t pool, cudaMemAccessDesc const* list,
                                  std::size_t count) noexcept override;
  cudaError_t mem_pool_get_access(cudaMemAccessFlags* flags, cudaMemPool_t pool,
                                  cudaMemLocation* location) noexcept override;
  cudaError_t mem_pool_trim_to(cudaMemPool_t pool, std::size_t keep) noexcept override;
  cudaError_t malloc_from_pool_async(void** ptr, std::size_t bytes, cudaMemPool_t pool,
                                     cudaStream_t stream) noexcept override;
  cudaError_t free_async(void* ptr, cudaStream_t stream) noexcept override;
  cudaError_t device_get_default_mem_pool(cudaMemPool_t* pool, int device) noexcept override;
  cudaError_t device_get_mem_pool(cudaMemPool_t* pool, int device) noexcept override;
  cudaError_t device_set_mem_pool(int device, cudaMemPool_t pool) noexcept override;
  cudaError_t mem_pool_export_to_shareable_handle(
      void* handle, cudaMemPool_t pool, cudaMemAllocationHandleType type) noexcept override;
  cudaError_t mem_pool_import_from_shareable_handle(
      cudaMemPool_t* pool, void* handle, cudaMemAllocationHandleType type) noexcept override;
  cudaError_t mem_pool_export_pointer(cudaMemPoolPtrExportData* data, void* ptr) noexcept override;
  cudaError_t mem_pool_import_pointer(void** ptr, cudaMemPool_t pool,
                                      cudaMemPoolPtrExportData* data) noexcept override;
  cudaError_t device_can_access_peer(int* can, int device, int peer) noexcept override;
  cudaError_t stream_get_device(cudaStream_t stream, int* device) noexcept override;
  cudaError_t pointer_attributes(void const* ptr, cudaMemoryType* type, int* device,
                                 cudaMemPool_t* pool, void const** base,
                                 std::size_t* size) noexcept override;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace gpumem
