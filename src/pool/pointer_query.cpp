// query_pointer: the driver's cuPointerGetAttributes, reached through cudart's entry points.
#include "../detail/driver_entry_point.hpp"

#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>
#include <gpumem/pool/pointer_query.hpp>

#include <cuda.h>

#include <array>

namespace gpumem {
namespace {

using get_attributes_fn = CUresult (*)(unsigned int, CUpointer_attribute*, void**, CUdeviceptr);

get_attributes_fn get_attributes()
{
  static get_attributes_fn const fn = [] {
    get_attributes_fn f{};
    detail::load_driver_symbol(f, "cuPointerGetAttributes", "query_pointer");
    return f;
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

pointer_info query_pointer(void const* ptr)
{
  unsigned int cu_type{};
  int ordinal{-1};
  CUmemoryPool pool{};
  CUdeviceptr start{};
  std::size_t size{};
  int managed{};
  std::array attrs{CU_POINTER_ATTRIBUTE_MEMORY_TYPE,    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                   CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                   CU_POINTER_ATTRIBUTE_RANGE_SIZE,     CU_POINTER_ATTRIBUTE_IS_MANAGED};
  std::array<void*, attrs.size()> data{&cu_type, &ordinal, &pool, &start, &size, &managed};
  auto const st = get_attributes()(static_cast<unsigned>(attrs.size()), attrs.data(), data.data(),
                                   reinterpret_cast<CUdeviceptr>(ptr));
  if (st != CUDA_SUCCESS) {
    throw cuda_error{cudaErrorInvalidValue,
                     detail::format("query_pointer(", ptr, "): cuPointerGetAttributes failed (",
                                    static_cast<int>(st), ")")};
  }
  pointer_info info;
  info.type = to_memory_type(cu_type, managed != 0);
  if (info.type == cudaMemoryTypeUnregistered) { return info; }
  info.device = info.type == cudaMemoryTypeHost ? -1 : ordinal;
  info.pool   = reinterpret_cast<cudaMemPool_t>(pool);
  info.base   = reinterpret_cast<void const*>(start);
  info.size   = size;
  return info;
}

}  // namespace gpumem
