// `gpumem info`: what this machine's CUDA can do for memory allocation.
#include "commands.hpp"
#include "device.hpp"
#include "report.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <iostream>
#include <string>

namespace gpumem::tool {
namespace {

std::string version_str(int v)
{
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

int attribute(cudaDeviceAttr a, int dev)
{
  int v = 0;
  if (cudaDeviceGetAttribute(&v, a, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return v;
}

std::string handle_types(int mask)
{
  if (mask <= 0) { return "none"; }
  std::string out;
  auto add = [&](int bit, char const* name) {
    if ((mask & bit) != 0) { out += (out.empty() ? "" : ", ") + std::string{name}; }
  };
  add(cudaMemHandleTypePosixFileDescriptor, "POSIX file descriptor");
  add(cudaMemHandleTypeWin32, "Win32");
  add(cudaMemHandleTypeWin32Kmt, "Win32 KMT");
  add(cudaMemHandleTypeFabric, "fabric");
  return out;
}

/// VMM granularity through the driver entry point (no link-time dependency on libcuda).
std::string vmm_granularity(int dev)
{
  using fn_t = CUresult (*)(size_t*, CUmemAllocationProp const*, CUmemAllocationGranularity_flags);
  void* fn   = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion("cuMemGetAllocationGranularity", &fn, 12000,
                                       cudaEnableDefault, &q) != cudaSuccess ||
      fn == nullptr) {
    (void)cudaGetLastError();
    return "unknown (driver entry point unavailable)";
  }
  CUmemAllocationProp prop{};
  prop.type          = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id   = dev;
  size_t min = 0, rec = 0;
  auto const get = reinterpret_cast<fn_t>(fn);
  if (get(&min, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
      get(&rec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS) {
    return "unknown (query failed)";
  }
  return human_bytes(min) + " minimum, " + human_bytes(rec) + " recommended";
}

void print_device(int dev)
{
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    std::cout << "device " << dev << ": properties unavailable\n";
    return;
  }
  std::size_t free_b = 0, total_b = 0;
  (void)cudaSetDevice(dev);
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) { (void)cudaGetLastError(); }
  std::cout << "device " << dev << ": " << p.name << " (compute capability " << p.major << "."
            << p.minor << ", " << p.multiProcessorCount << " SMs)\n"
            << "  memory: " << human_bytes(free_b) << " free of " << human_bytes(total_b) << "\n"
            << "  stream-ordered memory pools (cudaMallocAsync): "
            << (attribute(cudaDevAttrMemoryPoolsSupported, dev) == 1 ? "yes" : "no") << "\n"
            << "  pool IPC handle types: "
            << handle_types(attribute(cudaDevAttrMemoryPoolSupportedHandleTypes, dev)) << "\n"
            << "  managed memory: " << (p.managedMemory ? "yes" : "no")
            << ", concurrent managed access: " << (p.concurrentManagedAccess ? "yes" : "no")
            << ", pageable memory access (HMM/ATS): "
            << (attribute(cudaDevAttrPageableMemoryAccess, dev) == 1 ? "yes" : "no") << "\n"
            << "  virtual memory management granularity: " << vmm_granularity(dev) << "\n";
}

}  // namespace

int run_info()
{
  int runtime_v = 0, driver_v = 0;
  (void)cudaRuntimeGetVersion(&runtime_v);
  auto const drv = cudaDriverGetVersion(&driver_v);
  std::cout << "CUDA runtime " << version_str(runtime_v) << " (linked into gpumem), driver "
            << (drv == cudaSuccess && driver_v > 0 ? version_str(driver_v) : "not installed")
            << "\n";
  auto const why = why_no_gpu();
  if (!why.empty()) {
    std::cout << "No GPU: " << why << ".\n"
              << "gpumem still replays traces on a simulated device: `gpumem` or "
                 "`gpumem replay TRACE.csv --simulate`.\n";
    return 0;
  }
  int count = 0;
  (void)cudaGetDeviceCount(&count);
  std::cout << count << " CUDA device(s)\n";
  for (int d = 0; d < count; ++d) { print_device(d); }
  return 0;
}

}  // namespace gpumem::tool
