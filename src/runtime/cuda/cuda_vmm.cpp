// The driver's virtual-memory calls behind detail::runtime (see cuda_vmm.hpp). Entry points are
// looked up once, on first use; a driver without them gives a cuda_error that says so.
#include "cuda_vmm.hpp"
#include "driver_entry_point.hpp"

#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>

namespace gpumem::detail::cuda_vmm {
namespace {

struct driver_api {
  CUresult (*get_granularity)(std::size_t*, CUmemAllocationProp const*,
                              CUmemAllocationGranularity_flags){};
  CUresult (*address_reserve)(CUdeviceptr*, std::size_t, std::size_t, CUdeviceptr,
                              unsigned long long){};
  CUresult (*address_free)(CUdeviceptr, std::size_t){};
  CUresult (*create)(CUmemGenericAllocationHandle*, std::size_t, CUmemAllocationProp const*,
                     unsigned long long){};
  CUresult (*release)(CUmemGenericAllocationHandle){};
  CUresult (*map)(CUdeviceptr, std::size_t, std::size_t, CUmemGenericAllocationHandle,
                  unsigned long long){};
  CUresult (*unmap)(CUdeviceptr, std::size_t){};
  CUresult (*set_access)(CUdeviceptr, std::size_t, CUmemAccessDesc const*, std::size_t){};
  CUresult (*export_handle)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                            unsigned long long){};
  CUresult (*import_handle)(CUmemGenericAllocationHandle*, void*, CUmemAllocationHandleType){};
  CUresult (*error_name)(CUresult, char const**){};
  CUresult (*device_get)(CUdevice*, int){};
  CUresult (*device_attribute)(int*, CUdevice_attribute, CUdevice){};
  CUresult (*ctx_get_current)(CUcontext*){};
  CUresult (*retain_handle)(CUmemGenericAllocationHandle*, void*){};
  CUresult (*properties_of)(CUmemAllocationProp*, CUmemGenericAllocationHandle){};
  CUresult (*address_range)(CUdeviceptr*, std::size_t*, CUdeviceptr){};
};

template <class Fn>
void load(Fn& fn, char const* symbol)
{
  load_driver_symbol(fn, symbol, "virtual memory");
}

driver_api const& api()
{
  static driver_api const instance = [] {
    driver_api a;
    load(a.get_granularity, "cuMemGetAllocationGranularity");
    load(a.address_reserve, "cuMemAddressReserve");
    load(a.address_free, "cuMemAddressFree");
    load(a.create, "cuMemCreate");
    load(a.release, "cuMemRelease");
    load(a.map, "cuMemMap");
    load(a.unmap, "cuMemUnmap");
    load(a.set_access, "cuMemSetAccess");
    load(a.export_handle, "cuMemExportToShareableHandle");
    load(a.import_handle, "cuMemImportFromShareableHandle");
    load(a.error_name, "cuGetErrorName");
    load(a.device_get, "cuDeviceGet");
    load(a.device_attribute, "cuDeviceGetAttribute");
    load(a.ctx_get_current, "cuCtxGetCurrent");
    load(a.retain_handle, "cuMemRetainAllocationHandle");
    load(a.properties_of, "cuMemGetAllocationPropertiesFromHandle");
    load(a.address_range, "cuMemGetAddressRange");
    return a;
  }();
  return instance;
}

std::string describe(CUresult status)
{
  char const* name = "unknown error";
  if (api().error_name != nullptr) { (void)api().error_name(status, &name); }
  return format(name, " (", static_cast<int>(status), ")");
}

/// Throws out_of_memory for CUDA_ERROR_OUT_OF_MEMORY, cuda_error for any other failure.
void check(CUresult status, char const* call, std::string const& what)
{
  if (status == CUDA_SUCCESS) { return; }
  auto msg = format("virtual memory: ", call, " failed for ", what, ": ", describe(status));
  if (status == CUDA_ERROR_OUT_OF_MEMORY) { throw out_of_memory{msg}; }
  throw cuda_error{cudaErrorUnknown, msg};
}

void report(CUresult status, char const* call) noexcept
{
  if (status == CUDA_SUCCESS) { return; }
  std::fprintf(stderr, "gpumem: virtual memory: %s failed: %s\n", call, describe(status).c_str());
}

CUmemAllocationProp device_prop(int device, vmm_handle_properties properties)
{
  CUmemAllocationProp prop{};
  prop.type          = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id   = device;
  prop.requestedHandleTypes =
      properties.shareable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
  prop.allocFlags.gpuDirectRDMACapable = properties.gpu_direct_rdma ? 1 : 0;
  return prop;
}

CUdeviceptr dptr(void* ptr)
{
  return reinterpret_cast<CUdeviceptr>(ptr);
}

/// Makes a context current on the calling thread when it has none. On a thread that has made no
/// CUDA runtime call yet (so has no current context), cuMemSetAccess and cuMemUnmap took 0.8 to
/// 1.5 ms each instead of 20 to 45 us (H200, driver 580.159.04; bench/vmm_driver_bench with and
/// without a context). The context made current is the primary context of the thread's current
/// device, as the first runtime call on that thread would make it; which device is current does
/// not change. Costs one query when a context is current already.
void ensure_context() noexcept
{
  CUcontext current{};
  if (api().ctx_get_current(&current) == CUDA_SUCCESS && current != nullptr) { return; }
  int device{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
    (void)cudaGetLastError();  // the driver call that follows reports what is wrong
  }
}

}  // namespace

std::size_t granularity(int device)
{
  CUdevice dev{};
  check(api().device_get(&dev, device), "cuDeviceGet", format("device ", device));
  int supported{};
  check(api().device_attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                               dev),
        "cuDeviceGetAttribute", format("device ", device));
  if (supported == 0) {
    throw cuda_error{cudaErrorNotSupported,
                     format("virtual memory: device ", device,
                            " does not support virtual memory management "
                            "(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0)")};
  }
  auto const prop = device_prop(device, {});
  std::size_t bytes{};
  check(api().get_granularity(&bytes, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
        "cuMemGetAllocationGranularity", format("device ", device));
  return bytes;
}

void* reserve(std::size_t bytes, std::size_t alignment)
{
  CUdeviceptr base{};
  check(api().address_reserve(&base, bytes, alignment, 0, 0), "cuMemAddressReserve",
        bytes_str(bytes) + " of address space");
  return reinterpret_cast<void*>(base);
}

void unreserve(void* base, std::size_t bytes) noexcept
{
  report(api().address_free(dptr(base), bytes), "cuMemAddressFree");
}

vmm_handle create(std::size_t bytes, int device, vmm_handle_properties properties)
{
  ensure_context();
  auto const prop = device_prop(device, properties);
  CUmemGenericAllocationHandle handle{};
  check(api().create(&handle, bytes, &prop, 0), "cuMemCreate",
        format(bytes_str(bytes), " on device ", device));
  return handle;
}

bool gpu_direct_rdma_supported(int device)
{
  CUdevice dev{};
  check(api().device_get(&dev, device), "cuDeviceGet", format("device ", device));
  int supported{};
  check(api().device_attribute(&supported,
                               CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, dev),
        "cuDeviceGetAttribute", format("device ", device));
  return supported != 0;
}

vmm_allocation_info allocation_at(void const* ptr)
{
  ensure_context();
  CUmemGenericAllocationHandle handle{};
  check(api().retain_handle(&handle, const_cast<void*>(ptr)), "cuMemRetainAllocationHandle",
        format("the address ", ptr));
  CUmemAllocationProp prop{};
  CUdeviceptr base{};
  std::size_t bytes{};
  auto const got_props = api().properties_of(&prop, handle);
  auto const got_range = api().address_range(&base, &bytes, dptr(const_cast<void*>(ptr)));
  report(api().release(handle), "cuMemRelease");  // the reference retained above
  check(got_props, "cuMemGetAllocationPropertiesFromHandle", format("the address ", ptr));
  check(got_range, "cuMemGetAddressRange", format("the address ", ptr));
  vmm_allocation_info info;
  info.base   = reinterpret_cast<void*>(base);
  info.bytes  = bytes;
  info.device = prop.location.id;
  info.properties.shareable =
      (prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
  info.properties.gpu_direct_rdma = prop.allocFlags.gpuDirectRDMACapable != 0;
  return info;
}

void release(vmm_handle handle) noexcept
{
  ensure_context();
  report(api().release(handle), "cuMemRelease");
}

void map(void* ptr, std::size_t bytes, vmm_handle handle)
{
  ensure_context();
  check(api().map(dptr(ptr), bytes, 0, handle, 0), "cuMemMap",
        format(bytes_str(bytes), " at ", ptr));
}

void unmap(void* ptr, std::size_t bytes) noexcept
{
  ensure_context();
  report(api().unmap(dptr(ptr), bytes), "cuMemUnmap");
}

bool unmap_run(void* ptr, std::size_t bytes) noexcept
{
  static std::atomic<bool> refused{false};
  if (refused.load(std::memory_order_relaxed)) { return false; }
  if (api().unmap(dptr(ptr), bytes) == CUDA_SUCCESS) { return true; }
  refused.store(true, std::memory_order_relaxed);
  return false;
}

void set_access(void* ptr, std::size_t bytes, int device)
{
  ensure_context();
  CUmemAccessDesc desc{};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id   = device;
  desc.flags         = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check(api().set_access(dptr(ptr), bytes, &desc, 1), "cuMemSetAccess",
        format(bytes_str(bytes), " at ", ptr, " for device ", device));
}

int export_fd(vmm_handle handle)
{
  int fd = -1;
  check(api().export_handle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
        "cuMemExportToShareableHandle", "a POSIX file descriptor");
  return fd;
}

vmm_handle import_fd(int fd)
{
  CUmemGenericAllocationHandle handle{};
  // The driver takes a POSIX descriptor as the integer itself, passed in the pointer argument.
  void* os_handle = reinterpret_cast<void*>(static_cast<std::intptr_t>(fd));
  check(api().import_handle(&handle, os_handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
        "cuMemImportFromShareableHandle", format("file descriptor ", fd));
  return handle;
}

}  // namespace gpumem::detail::cuda_vmm
