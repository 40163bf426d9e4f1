// cuPointerGetAttributes, reached through cudart's driver entry points (no libcuda link).
#include "cuda_pointer_attributes.hpp"

#include "driver_entry_point.hpp"

#include <cuda.h>

#include <array>

namespace gpumem::detail {
namespace {

using get_attributes_fn = CUresult (*)(unsigned int, CUpointer_attribute*, void**, CUdeviceptr);

/// The driver's function, or null when it does not provide it.
get_attributes_fn get_attributes() noexcept
{
  static get_attributes_fn const fn = []() noexcept -> get_attributes_fn {
    try {
      get_attributes_fn f{};
      load_driver_symbol(f, "cuPointerGetAttributes", "pointer queries");
      return f;
    } catch (...) {
      return nullptr;
    }
  }();
  return fn;
}

cudaMemoryType to_memory_type(unsigned int cu_type, bool managed) noexcept
{
  if (managed) { return cudaMemoryTypeManaged; }
  switch (cu_type) {
    case CU_MEMORYTYPE_HOST:
      return cudaMemoryTypeHost;
    case CU_MEMORYTYPE_DEVICE:
      return cudaMemoryTypeDevice;
    case CU_MEMORYTYPE_UNIFIED:
      return cudaMemoryTypeManaged;
    default:
      return cudaMemoryTypeUnregistered;
  }
}

}  // namespace

cudaError_t cuda_pointer_attributes(void const* ptr, cudaMemoryType* type, int* device,
                                    cudaMemPool_t* pool, void const** base,
                                    std::size_t* size) noexcept
{
  auto const fn = get_attributes();
  if (fn == nullptr) { return cudaErrorNotSupported; }
  unsigned int cu_type{};
  int ordinal{-1};
  CUmemoryPool cu_pool{};
  CUdeviceptr start{};
  std::size_t bytes{};
  int managed{};
  std::array attrs{CU_POINTER_ATTRIBUTE_MEMORY_TYPE,    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                   CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                   CU_POINTER_ATTRIBUTE_RANGE_SIZE,     CU_POINTER_ATTRIBUTE_IS_MANAGED};
  std::array<void*, attrs.size()> data{&cu_type, &ordinal, &cu_pool, &start, &bytes, &managed};
  auto const st = fn(static_cast<unsigned>(attrs.size()), attrs.data(), data.data(),
                     reinterpret_cast<CUdeviceptr>(ptr));
  if (st != CUDA_SUCCESS) { return cudaErrorInvalidValue; }
  *type   = to_memory_type(cu_type, managed != 0);
  *device = *type == cudaMemoryTypeHost || *type == cudaMemoryTypeUnregistered ? -1 : ordinal;
  *pool   = reinterpret_cast<cudaMemPool_t>(cu_pool);
  *base   = reinterpret_cast<void const*>(start);
  *size   = bytes;
  return cudaSuccess;
}

}  // namespace gpumem::detail
