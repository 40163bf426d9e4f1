// The real CUDA runtime behind detail::runtime. With error.cpp and the resources' own sources
// that need CUDA-only features (pools, IPC), this is where gpumem calls cudart.
#include "cuda_pointer_attributes.hpp"
#include "cuda_vmm.hpp"

#include <gpumem/detail/format.hpp>
#include <gpumem/detail/runtime.hpp>
#include <gpumem/detail/stream_capture.hpp>
#include <gpumem/error.hpp>

namespace gpumem::detail {
namespace {

cudaMemLocation to_cuda(mem_location where)
{
  cudaMemLocation loc{};
  loc.type =
      where.device == mem_location::host ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
  loc.id = where.device == mem_location::host ? 0 : where.device;
  return loc;
}

class cuda_runtime_impl final : public runtime {
 public:
  [[nodiscard]] char const* name() const noexcept override { return "cuda"; }

  [[nodiscard]] void* allocate(memory_kind kind, std::size_t bytes) override
  {
    void* ptr{};
    switch (kind) {
      case memory_kind::device:
        GPUMEM_CUDA_TRY(cudaMalloc(&ptr, bytes));
        break;
      case memory_kind::managed:
        GPUMEM_CUDA_TRY(cudaMallocManaged(&ptr, bytes, cudaMemAttachGlobal));
        break;
      case memory_kind::pinned_host:
        GPUMEM_CUDA_TRY(cudaHostAlloc(&ptr, bytes, cudaHostAllocDefault));
        break;
    }
    return ptr;
  }

  void free(memory_kind kind, void* ptr) noexcept override
  {
    if (kind == memory_kind::pinned_host) {
      GPUMEM_CUDA_TRY_NOEXCEPT(cudaFreeHost(ptr));
    } else {
      GPUMEM_CUDA_TRY_NOEXCEPT(cudaFree(ptr));
    }
  }

  [[nodiscard]] mem_info memory_info() override
  {
    mem_info info{};
    GPUMEM_CUDA_TRY(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
    return info;
  }

  void prefetch(void const* ptr, std::size_t bytes, mem_location where,
                cudaStream_t stream) override
  {
    GPUMEM_CUDA_TRY(cudaMemPrefetchAsync(ptr, bytes, to_cuda(where), 0, stream));
  }

  void advise_preferred_location(void const* ptr, std::size_t bytes, mem_location where) override
  {
    GPUMEM_CUDA_TRY(cudaMemAdvise(ptr, bytes, cudaMemAdviseSetPreferredLocation, to_cuda(where)));
  }

  [[nodiscard]] int current_device() override
  {
    int device{};
    GPUMEM_CUDA_TRY(cudaGetDevice(&device));
    return device;
  }

  void set_device(int device) override { GPUMEM_CUDA_TRY(cudaSetDevice(device)); }

  [[nodiscard]] int device_count() noexcept override
  {
    int count{};
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return count;
  }

  [[nodiscard]] int device_attribute(cudaDeviceAttr attr, int device) override
  {
    int value{};
    GPUMEM_CUDA_TRY(cudaDeviceGetAttribute(&value, attr, device));
    return value;
  }

  [[nodiscard]] cudaEvent_t event_create() override
  {
    cudaEvent_t event{};
    GPUMEM_CUDA_TRY(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    return event;
  }

  void event_destroy(cudaEvent_t event) noexcept override
  {
    GPUMEM_CUDA_TRY_NOEXCEPT(cudaEventDestroy(event));
  }

  void event_record(cudaEvent_t event, cudaStream_t stream) override
  {
    GPUMEM_CUDA_TRY(cudaEventRecord(event, stream));
  }

  [[nodiscard]] bool event_query(cudaEvent_t event) override
  {
    auto const status = cudaEventQuery(event);
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    GPUMEM_CUDA_TRY(status);
    return true;
  }

  void event_synchronize(cudaEvent_t event) override
  {
    GPUMEM_CUDA_TRY(cudaEventSynchronize(event));
  }

  void stream_wait_event(cudaStream_t stream, cudaEvent_t event) override
  {
    GPUMEM_CUDA_TRY(cudaStreamWaitEvent(stream, event, 0));
  }

  void stream_synchronize(cudaStream_t stream) override
  {
    GPUMEM_CUDA_TRY(cudaStreamSynchronize(stream));
  }

  void device_synchronize() override { GPUMEM_CUDA_TRY(cudaDeviceSynchronize()); }
  bool stream_capturing(cudaStream_t stream) override
  {
    cudaStreamCaptureStatus status{};
    auto const err = cudaStreamIsCapturing(stream, &status);
    if (err == cudaSuccess) { return status != cudaStreamCaptureStatusNone; }
    if (detail::is_stream_capture_error(err)) {  // the legacy stream during another's capture
      (void)cudaGetLastError();
      return true;
    }
    GPUMEM_CUDA_TRY(err);
    return true;
  }
  void memcpy_async(void* dst, void const* src, std::size_t bytes, cudaStream_t stream) override
  {
    GPUMEM_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  }
  void memset_async(void* dst, int value, std::size_t bytes, cudaStream_t stream) override
  {
    GPUMEM_CUDA_TRY(cudaMemsetAsync(dst, value, bytes, stream));
  }

  [[nodiscard]] std::size_t vmm_granularity(int device) override
  {
    return cuda_vmm::granularity(device);
  }
  [[nodiscard]] void* vmm_reserve(std::size_t bytes, std::size_t alignment) override
  {
    return cuda_vmm::reserve(bytes, alignment);
  }
  void vmm_unreserve(void* base, std::size_t bytes) noexcept override
  {
    cuda_vmm::unreserve(base, bytes);
  }
  [[nodiscard]] vmm_handle vmm_create(std::size_t bytes, int device,
                                      vmm_handle_properties properties) override
  {
    return cuda_vmm::create(bytes, device, properties);
  }
  [[nodiscard]] bool vmm_gpu_direct_rdma_supported(int device) override
  {
    return cuda_vmm::gpu_direct_rdma_supported(device);
  }
  [[nodiscard]] vmm_allocation_info vmm_allocation_at(void const* ptr) override
  {
    return cuda_vmm::allocation_at(ptr);
  }
  void vmm_release(vmm_handle handle) noexcept override { cuda_vmm::release(handle); }
  void vmm_map(void* ptr, std::size_t bytes, vmm_handle handle) override
  {
    cuda_vmm::map(ptr, bytes, handle);
  }
  void vmm_unmap(void* ptr, std::size_t bytes) noexcept override { cuda_vmm::unmap(ptr, bytes); }
  bool vmm_unmap_run(void* ptr, std::size_t bytes) noexcept override
  {
    return cuda_vmm::unmap_run(ptr, bytes);
  }
  void vmm_set_access(void* ptr, std::size_t bytes, int device) override
  {
    cuda_vmm::set_access(ptr, bytes, device);
  }
  [[nodiscard]] int vmm_export_fd(vmm_handle handle) override
  {
    return cuda_vmm::export_fd(handle);
  }
  [[nodiscard]] vmm_handle vmm_import_fd(int fd) override { return cuda_vmm::import_fd(fd); }

  // -- memory pools: CUDA's own calls; a failure's sticky "last error" is cleared here ---------
  [[nodiscard]] int driver_version() noexcept override
  {
    int v{};
    return settled(cudaDriverGetVersion(&v)) == cudaSuccess ? v : 0;
  }
  cudaError_t mem_pool_create(cudaMemPool_t* pool, cudaMemPoolProps const* props) noexcept override
  {
    return settled(cudaMemPoolCreate(pool, props));
  }
  cudaError_t mem_pool_destroy(cudaMemPool_t pool) noexcept override
  {
    return settled(cudaMemPoolDestroy(pool));
  }
  cudaError_t mem_pool_set_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                     void* value) noexcept override
  {
    return settled(cudaMemPoolSetAttribute(pool, attr, value));
  }
  cudaError_t mem_pool_get_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                     void* value) noexcept override
  {
    return settled(cudaMemPoolGetAttribute(pool, attr, value));
  }
  cudaError_t mem_pool_set_access(cudaMemPool_t pool, cudaMemAccessDesc const* list,
                                  std::size_t count) noexcept override
  {
    return settled(cudaMemPoolSetAccess(pool, list, count));
  }
  cudaError_t mem_pool_get_access(cudaMemAccessFlags* flags, cudaMemPool_t pool,
                                  cudaMemLocation* location) noexcept override
  {
    return settled(cudaMemPoolGetAccess(flags, pool, location));
  }
  cudaError_t mem_pool_trim_to(cudaMemPool_t pool, std::size_t keep) noexcept override
  {
    return settled(cudaMemPoolTrimTo(pool, keep));
  }
  cudaError_t malloc_from_pool_async(void** ptr, std::size_t bytes, cudaMemPool_t pool,
                                     cudaStream_t stream) noexcept override
  {
    return settled(cudaMallocFromPoolAsync(ptr, bytes, pool, stream));
  }
  cudaError_t free_async(void* ptr, cudaStream_t stream) noexcept override
  {
    return settled(cudaFreeAsync(ptr, stream));
  }
  cudaError_t device_get_default_mem_pool(cudaMemPool_t* pool, int device) noexcept override
  {
    return settled(cudaDeviceGetDefaultMemPool(pool, device));
  }
  cudaError_t device_get_mem_pool(cudaMemPool_t* pool, int device) noexcept override
  {
    return settled(cudaDeviceGetMemPool(pool, device));
  }
  cudaError_t device_set_mem_pool(int device, cudaMemPool_t pool) noexcept override
  {
    return settled(cudaDeviceSetMemPool(device, pool));
  }
  cudaError_t mem_pool_export_to_shareable_handle(
      void* handle, cudaMemPool_t pool, cudaMemAllocationHandleType type) noexcept override
  {
    return settled(cudaMemPoolExportToShareableHandle(handle, pool, type, 0));
  }
  cudaError_t mem_pool_import_from_shareable_handle(
      cudaMemPool_t* pool, void* handle, cudaMemAllocationHandleType type) noexcept override
  {
    return settled(cudaMemPoolImportFromShareableHandle(pool, handle, type, 0));
  }
  cudaError_t mem_pool_export_pointer(cudaMemPoolPtrExportData* data, void* ptr) noexcept override
  {
    return settled(cudaMemPoolExportPointer(data, ptr));
  }
  cudaError_t mem_pool_import_pointer(void** ptr, cudaMemPool_t pool,
                                      cudaMemPoolPtrExportData* data) noexcept override
  {
    return settled(cudaMemPoolImportPointer(ptr, pool, data));
  }
  cudaError_t device_can_access_peer(int* can, int device, int peer) noexcept override
  {
    return settled(cudaDeviceCanAccessPeer(can, device, peer));
  }
  cudaError_t stream_get_device(cudaStream_t stream, int* device) noexcept override
  {
    return settled(cudaStreamGetDevice(stream, device));
  }
  cudaError_t pointer_attributes(void const* ptr, cudaMemoryType* type, int* device,
                                 cudaMemPool_t* pool, void const** base,
                                 std::size_t* size) noexcept override
  {
    return cuda_pointer_attributes(ptr, type, device, pool, base, size);
  }

 private:
  static cudaError_t settled(cudaError_t status) noexcept
  {
    if (status != cudaSuccess) { (void)cudaGetLastError(); }
    return status;
  }
};

}  // namespace

runtime& cuda_runtime() noexcept
{
  static cuda_runtime_impl instance;
  return instance;
}

}  // namespace gpumem::detail

namespace gpumem {

char const* to_string(memory_kind kind) noexcept
{
  switch (kind) {
    case memory_kind::device:
      return "device";
    case memory_kind::managed:
      return "managed";
    case memory_kind::pinned_host:
      return "pinned host";
  }
  return "unknown";
}

bool runtime::vmm_unmap_run(void*, std::size_t) noexcept
{
  return false;
}

bool runtime::vmm_gpu_direct_rdma_supported(int)
{
  return false;
}

vmm_allocation_info runtime::vmm_allocation_at(void const* ptr)
{
  throw cuda_error{
      cudaErrorNotSupported,
      detail::format("the ", name(), " runtime cannot describe the physical allocation at ", ptr)};
}

bool runtime::stream_capturing(cudaStream_t)
{
  return false;
}

void runtime::memcpy_async(void*, void const*, std::size_t bytes, cudaStream_t)
{
  throw cuda_error{
      cudaErrorNotSupported,
      detail::format("the ", name(), " runtime cannot copy memory (", bytes, " bytes asked)")};
}

void runtime::memset_async(void*, int, std::size_t bytes, cudaStream_t)
{
  throw cuda_error{
      cudaErrorNotSupported,
      detail::format("the ", name(), " runtime cannot set memory (", bytes, " bytes asked)")};
}

}  // namespace gpumem
