// python/src/torch_allocator/torch_allocator.cpp — the shared library that PyTorch's
// torch.cuda.memory.CUDAPluggableAllocator loads (gpumem/_torch_allocator.so).
//
// Exports, with C linkage:
//   void* gpumem_torch_malloc(ssize_t size, int device, cudaStream_t stream);
//   void  gpumem_torch_free(void* ptr, ssize_t size, int device, cudaStream_t stream);
// and, for gpumem.torch:
//   int   gpumem_torch_set_resource(int device, void* resource);  // device -1: every device
//   void* gpumem_torch_get_resource(int device);
//   int   gpumem_torch_has_c10(void);  // 1 when OOM raises torch.OutOfMemoryError
//
// Each device has one gpumem device_memory_resource (set by gpumem.torch.use(), which keeps its
// Python object alive for the life of the process). PyTorch calls malloc/free from any thread,
// without the GIL: the resource must be thread-safe (wrap it in a ThreadSafeResourceAdaptor if
// not).
//
// Errors: malloc on a device with no resource, or a failing resource, throws through PyTorch.
// Built against PyTorch's c10 (GPUMEM_WITH_C10), an allocation failure is rethrown as
// c10::OutOfMemoryError carrying gpumem's message, which PyTorch raises as torch.OutOfMemoryError;
// without c10 the gpumem exception reaches PyTorch, which raises RuntimeError with the message.
#include <gpumem/mr/device_memory_resource.hpp>

#include <sys/types.h>

#include <array>
#include <atomic>
#include <exception>
#include <new>
#include <string>

#ifdef GPUMEM_WITH_C10
#include <c10/util/Exception.h>
#endif

#define GPUMEM_TORCH_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using gpumem::mr::device_memory_resource;

constexpr int max_devices = 64;
std::array<std::atomic<device_memory_resource*>, max_devices> resources{};

[[noreturn]] void fail(std::string const& msg, bool out_of_memory)
{
#ifdef GPUMEM_WITH_C10
  if (out_of_memory) { throw c10::OutOfMemoryError({__func__, __FILE__, __LINE__}, msg); }
  throw c10::Error({__func__, __FILE__, __LINE__}, msg);
#else
  if (out_of_memory) { throw gpumem::out_of_memory{msg}; }
  throw gpumem::logic_error{msg};
#endif
}

device_memory_resource& resource_of(int device)
{
  auto* r = (device >= 0 && device < max_devices) ? resources[device].load() : nullptr;
  if (r == nullptr) {
    fail("gpumem torch allocator: no gpumem resource is installed for CUDA device " +
             std::to_string(device) + " (call gpumem.torch.use(..., device=" +
             std::to_string(device) + ") before PyTorch's first CUDA allocation)",
         false);
  }
  return *r;
}

}  // namespace

GPUMEM_TORCH_EXPORT void* gpumem_torch_malloc(ssize_t size, int device, cudaStream_t stream)
{
  auto& r = resource_of(device);
  try {
    return r.allocate(static_cast<std::size_t>(size), gpumem::cuda_stream_view{stream});
  } catch (std::bad_alloc const& e) {  // gpumem::out_of_memory and bad_alloc
    fail(std::string{"gpumem: "} + e.what(), true);
  } catch (std::exception const& e) {
    fail(std::string{"gpumem: "} + e.what(), false);
  }
}

GPUMEM_TORCH_EXPORT void gpumem_torch_free(void* ptr, ssize_t size, int device, cudaStream_t stream)
{
  auto* r = (device >= 0 && device < max_devices) ? resources[device].load() : nullptr;
  if (r != nullptr) {
    r->deallocate(ptr, static_cast<std::size_t>(size), gpumem::cuda_stream_view{stream});
  }
}

GPUMEM_TORCH_EXPORT int gpumem_torch_set_resource(int device, void* resource)
{
  auto* r = static_cast<device_memory_resource*>(resource);
  if (device == -1) {
    for (auto& slot : resources) { slot.store(r); }
    return 0;
  }
  if (device < 0 || device >= max_devices) { return -1; }
  resources[device].store(r);
  return 0;
}

GPUMEM_TORCH_EXPORT void* gpumem_torch_get_resource(int device)
{
  return (device >= 0 && device < max_devices) ? resources[device].load() : nullptr;
}

GPUMEM_TORCH_EXPORT int gpumem_torch_has_c10(void)
{
#ifdef GPUMEM_WITH_C10
  return 1;
#else
  return 0;
#endif
}
