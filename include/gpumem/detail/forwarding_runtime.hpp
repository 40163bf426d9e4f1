// gpumem/detail/forwarding_runtime.hpp — a runtime that passes every call to another one.
// Derive from it to observe or change a few calls (trace::metered_runtime counts what is held).
// Not API.
#pragma once

#include <gpumem/detail/runtime.hpp>

namespace gpumem::detail {

class forwarding_runtime : public runtime {
 public:
  explicit forwarding_runtime(runtime& inner) noexcept : inner_{&inner} {}

  [[nodiscard]] runtime& inner() const noexcept { return *inner_; }

  char const* name() const noexcept override { return inner_->name(); }
  void* allocate(memory_kind kind, std::size_t bytes) override
  {
    return inner_->allocate(kind, bytes);
  }
  void free(memory_kind kind, void* ptr) noexcept override { inner_->free(kind, ptr); }
  mem_info memory_info() override { return inner_->memory_info(); }
  void prefetch(void const* ptr, std::size_t bytes, mem_location where,
                cudaStream_t stream) override
  {
    inner_->prefetch(ptr, bytes, where, stream);
  }
  void advise_preferred_location(void const* ptr, std::size_t bytes, mem_location where) override
  {
    inner_->advise_preferred_location(ptr, bytes, where);
  }
  int current_device() override { return inner_->current_device(); }
  void set_device(int device) override { inner_->set_device(device); }
  int device_count() noexcept override { return inner_->device_count(); }
  int device_attribute(cudaDeviceAttr attr, int device) override
  {
    return inner_->device_attribute(attr, device);
  }
  cudaEvent_t event_create() override { return inner_->event_create(); }
  void event_destroy(cudaEvent_t event) noexcept override { inner_->event_destroy(event); }
  void event_record(cudaEvent_t event, cudaStream_t stream) override
  {
    inner_->event_record(event, stream);
  }
  bool event_query(cudaEvent_t event) override { return inner_->event_query(event); }
  void event_synchronize(cudaEvent_t event) override { inner_->event_synchronize(event); }
  void stream_wait_event(cudaStream_t stream, cudaEvent_t event) override
  {
    inner_->stream_wait_event(stream, event);
  }
  void stream_synchronize(cudaStream_t stream) override { inner_->stream_synchronize(stream); }
  void device_synchronize() override { inner_->device_synchronize(); }
  bool stream_capturing(cudaStream_t stream) override { return inner_->stream_capturing(stream); }
  void memcpy_async(void* dst, void const* src, std::size_t bytes, cudaStream_t stream) override
  {
    inner_->memcpy_async(dst, src, bytes, stream);
  }
  void memset_async(void* dst, int value, std::size_t bytes, cudaStream_t stream) override
  {
    inner_->memset_async(dst, value, bytes, stream);
  }
  std::size_t vmm_granularity(int device) override { return inner_->vmm_granularity(device); }
  void* vmm_reserve(std::size_t bytes, std::size_t alignment) override
  {
    return inner_->vmm_reserve(bytes, alignment);
  }
  void vmm_unreserve(void* base, std::size_t bytes) noexcept override
  {
    inner_->vmm_unreserve(base, bytes);
  }
  vmm_handle vmm_create(std::size_t bytes, int device, vmm_handle_properties properties) override
  {
    return inner_->vmm_create(bytes, device, properties);
  }
  bool vmm_gpu_direct_rdma_supported(int device) override
  {
    return inner_->vmm_gpu_direct_rdma_supported(device);
  }
  vmm_allocation_info vmm_allocation_at(void const* ptr) override
  {
    return inner_->vmm_allocation_at(ptr);
  }
  void vmm_release(vmm_handle handle) noexcept override { inner_->vmm_release(handle); }
  void vmm_map(void* ptr, std::size_t bytes, vmm_handle handle) override
  {
    inner_->vmm_map(ptr, bytes, handle);
  }
  void vmm_unmap(void* ptr, std::size_t bytes) noexcept override { inner_->vmm_unmap(ptr, bytes); }
  bool vmm_unmap_run(void* ptr, std::size_t bytes) noexcept override
  {
    return inner_->vmm_unmap_run(ptr, bytes);
  }
  void vmm_set_access(void* ptr, std::size_t bytes, int device) override
  {
    inner_->vmm_set_access(ptr, bytes, device);
  }
  int vmm_export_fd(vmm_handle handle) override { return inner_->vmm_export_fd(handle); }
  vmm_handle vmm_import_fd(int fd) override { return inner_->vmm_import_fd(fd); }
  int driver_version() noexcept override { return inner_->driver_version(); }
  cudaError_t mem_pool_create(cudaMemPool_t* pool, cudaMemPoolProps const* props) noexcept override
  {
    return inner_->mem_pool_create(pool, props);
  }
  cudaError_t mem_pool_destroy(cudaMemPool_t pool) noexcept override
  {
    return inner_->mem_pool_destroy(pool);
  }
  cudaError_t mem_pool_set_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                     void* value) noexcept override
  {
    return inner_->mem_pool_set_attribute(pool, attr, value);
  }
  cudaError_t mem_pool_get_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                     void* value) noexcept override
  {
    return inner_->mem_pool_get_attribute(pool, attr, value);
  }
  cudaError_t mem_pool_set_access(cudaMemPool_t pool, cudaMemAccessDesc const* list,
                                  std::size_t count) noexcept override
  {
    return inner_->mem_pool_set_access(pool, list, count);
  }
  cudaError_t mem_pool_get_access(cudaMemAccessFlags* flags, cudaMemPool_t pool,
                                  cudaMemLocation* location) noexcept override
  {
    return inner_->mem_pool_get_access(flags, pool, location);
  }
  cudaError_t mem_pool_trim_to(cudaMemPool_t pool, std::size_t keep) noexcept override
  {
    return inner_->mem_pool_trim_to(pool, keep);
  }
  cudaError_t malloc_from_pool_async(void** ptr, std::size_t bytes, cudaMemPool_t pool,
                                     cudaStream_t stream) noexcept override
  {
    return inner_->malloc_from_pool_async(ptr, bytes, pool, stream);
  }
  cudaError_t free_async(void* ptr, cudaStream_t stream) noexcept override
  {
    return inner_->free_async(ptr, stream);
  }
  cudaError_t device_get_default_mem_pool(cudaMemPool_t* pool, int device) noexcept override
  {
    return inner_->device_get_default_mem_pool(pool, device);
  }
  cudaError_t device_get_mem_pool(cudaMemPool_t* pool, int device) noexcept override
  {
    return inner_->device_get_mem_pool(pool, device);
  }
  cudaError_t device_set_mem_pool(int device, cudaMemPool_t pool) noexcept override
  {
    return inner_->device_set_mem_pool(device, pool);
  }
  cudaError_t mem_pool_export_to_shareable_handle(
      void* handle, cudaMemPool_t pool, cudaMemAllocationHandleType type) noexcept override
  {
    return inner_->mem_pool_export_to_shareable_handle(handle, pool, type);
  }
  cudaError_t mem_pool_import_from_shareable_handle(
      cudaMemPool_t* pool, void* handle, cudaMemAllocationHandleType type) noexcept override
  {
    return inner_->mem_pool_import_from_shareable_handle(pool, handle, type);
  }
  cudaError_t mem_pool_export_pointer(cudaMemPoolPtrExportData* data, void* ptr) noexcept override
  {
    return inner_->mem_pool_export_pointer(data, ptr);
  }
  cudaError_t mem_pool_import_pointer(void** ptr, cudaMemPool_t pool,
                                      cudaMemPoolPtrExportData* data) noexcept override
  {
    return inner_->mem_pool_import_pointer(ptr, pool, data);
  }
  cudaError_t device_can_access_peer(int* can, int device, int peer) noexcept override
  {
    return inner_->device_can_access_peer(can, device, peer);
  }
  cudaError_t stream_get_device(cudaStream_t stream, int* device) noexcept override
  {
    return inner_->stream_get_device(stream, device);
  }
  cudaError_t pointer_attributes(void const* ptr, cudaMemoryType* type, int* device,
                                 cudaMemPool_t* pool, void const** base,
                                 std::size_t* size) noexcept override
  {
    return inner_->pointer_attributes(ptr, type, device, pool, base, size);
  }

 private:
  runtime* inner_;
};

}  // namespace gpumem::detail
