// The driver's virtual-memory calls (cuMem*), reached through cudart's driver entry points so that
// the library does not link libcuda and still loads on a machine without a driver. Used only by
// the CUDA runtime (src/runtime/cuda/cuda_runtime.cpp); semantics as in detail/runtime.hpp.
#pragma once

#include <gpumem/detail/runtime.hpp>

#include <cstddef>

namespace gpumem::detail::cuda_vmm {

[[nodiscard]] std::size_t granularity(int device);
[[nodiscard]] void* reserve(std::size_t bytes, std::size_t alignment);
void unreserve(void* base, std::size_t bytes) noexcept;
[[nodiscard]] vmm_handle create(std::size_t bytes, int device, vmm_handle_properties properties);
/// CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED of `device`.
[[nodiscard]] bool gpu_direct_rdma_supported(int device);
/// cuMemRetainAllocationHandle + cuMemGetAllocationPropertiesFromHandle + cuMemGetAddressRange
/// (the retained handle released again).
[[nodiscard]] vmm_allocation_info allocation_at(void const* ptr);
void release(vmm_handle handle) noexcept;
void map(void* ptr, std::size_t bytes, vmm_handle handle);
void unmap(void* ptr, std::size_t bytes) noexcept;
/// cuMemUnmap over several adjacent whole mappings; false (nothing changed, nothing reported) when
/// the driver refuses — then it is not asked again in this process.
bool unmap_run(void* ptr, std::size_t bytes) noexcept;
void set_access(void* ptr, std::size_t bytes, int device);
[[nodiscard]] int export_fd(vmm_handle handle);
[[nodiscard]] vmm_handle import_fd(int fd);

}  // namespace gpumem::detail::cuda_vmm
