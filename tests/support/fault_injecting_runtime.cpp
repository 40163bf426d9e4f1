#include "fault_injecting_runtime.hpp"

#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>

#include <algorithm>

namespace gpumem::test {
namespace {

struct kind_info {
  char const* name;
  char const* call;
  bool silent;
};

constexpr std::array<kind_info, fault_kind_count> infos{{
    {"allocate", "cudaMalloc", false},
    {"free", "cudaFree", true},
    {"memory_info", "cudaMemGetInfo", false},
    {"prefetch", "cudaMemPrefetchAsync", false},
    {"advise", "cudaMemAdvise", false},
    {"current_device", "cudaGetDevice", false},
    {"device_attribute", "cudaDeviceGetAttribute", false},
    {"event_create", "cudaEventCreateWithFlags", false},
    {"event_destroy", "cudaEventDestroy", true},
    {"event_record", "cudaEventRecord", false},
    {"event_query", "cudaEventQuery", false},
    {"event_synchronize", "cudaEventSynchronize", false},
    {"stream_wait_event", "cudaStreamWaitEvent", false},
    {"stream_synchronize", "cudaStreamSynchronize", false},
    {"device_synchronize", "cudaDeviceSynchronize", false},
    {"vmm_granularity", "cuMemGetAllocationGranularity", false},
    {"vmm_reserve", "cuMemAddressReserve", false},
    {"vmm_unreserve", "cuMemAddressFree", true},
    {"vmm_create", "cuMemCreate", false},
    {"vmm_release", "cuMemRelease", true},
    {"vmm_map", "cuMemMap", false},
    {"vmm_unmap", "cuMemUnmap", true},
    {"vmm_set_access", "cuMemSetAccess", false},
    {"vmm_export_fd", "cuMemExportToShareableHandle", false},
    {"vmm_import_fd", "cuMemImportFromShareableHandle", false},
    {"mem_pool_create", "cudaMemPoolCreate", false},
    {"mem_pool_destroy", "cudaMemPoolDestroy", true},
    {"mem_pool_set_attribute", "cudaMemPoolSetAttribute", false},
    {"mem_pool_get_attribute", "cudaMemPoolGetAttribute", false},
    {"mem_pool_trim_to", "cudaMemPoolTrimTo", false},
    {"malloc_from_pool_async", "cudaMallocFromPoolAsync", false},
    {"free_async", "cudaFreeAsync", true},
    {"device_get_default_mem_pool", "cudaDeviceGetDefaultMemPool", false},
    {"device_get_mem_pool", "cudaDeviceGetMemPool", false},
}};

kind_info const& info(fault_kind kind) noexcept
{
  return infos[static_cast<std::size_t>(kind)];
}

bool is_vmm(fault_kind kind) noexcept
{
  return kind >= fault_kind::vmm_granularity && kind <= fault_kind::vmm_import_fd;
}

/// The status CUDA documents for a failure of the runtime call of `kind`: out of memory where
/// the call takes memory, an earlier asynchronous launch's failure for stream and event calls
/// (every one of them may return it), an invalid device for a prefetch, an unavailable device for
/// cudaGetDevice, an invalid value for advice and attributes.
cudaError_t runtime_status(fault_kind kind) noexcept
{
  switch (kind) {
    case fault_kind::allocate:
    case fault_kind::event_create:
    case fault_kind::malloc_from_pool_async:
      return cudaErrorMemoryAllocation;
    case fault_kind::mem_pool_create:
    case fault_kind::mem_pool_destroy:
    case fault_kind::mem_pool_set_attribute:
    case fault_kind::mem_pool_get_attribute:
    case fault_kind::mem_pool_trim_to:
    case fault_kind::free_async:
    case fault_kind::device_get_default_mem_pool:
    case fault_kind::device_get_mem_pool:
      return cudaErrorInvalidValue;
    case fault_kind::prefetch:
      return cudaErrorInvalidDevice;
    case fault_kind::current_device:
      return cudaErrorDevicesUnavailable;
    case fault_kind::advise:
    case fault_kind::device_attribute:
      return cudaErrorInvalidValue;
    default:
      return cudaErrorLaunchFailure;
  }
}

/// The driver status of a virtual-memory call: out of memory where it takes memory (address
/// space, physical memory, page tables for a mapping), an invalid value otherwise.
bool driver_out_of_memory(fault_kind kind) noexcept
{
  return kind == fault_kind::vmm_reserve || kind == fault_kind::vmm_create ||
         kind == fault_kind::vmm_map;
}

}  // namespace

char const* to_string(fault_kind kind) noexcept
{
  return info(kind).name;
}

char const* cuda_call(fault_kind kind) noexcept
{
  return info(kind).call;
}

bool is_silent(fault_kind kind) noexcept
{
  return info(kind).silent;
}

fault_injecting_runtime::~fault_injecting_runtime()
{
  settle();
}

void fault_injecting_runtime::arm(fault_kind kind, std::uint64_t n)
{
  std::lock_guard lock{mutex_};
  armed_kind_ = kind;
  armed_at_   = counts_[static_cast<std::size_t>(kind)] + n;
  fired_      = false;
  message_.clear();
}

void fault_injecting_runtime::disarm()
{
  std::lock_guard lock{mutex_};
  armed_at_ = 0;
}

bool fault_injecting_runtime::fired() const
{
  std::lock_guard lock{mutex_};
  return fired_;
}

std::string fault_injecting_runtime::fired_message() const
{
  std::lock_guard lock{mutex_};
  return message_;
}

std::string fault_injecting_runtime::fired_status() const
{
  std::lock_guard lock{mutex_};
  return status_;
}

fault_counts fault_injecting_runtime::counts() const
{
  std::lock_guard lock{mutex_};
  return counts_;
}

std::size_t fault_injecting_runtime::refused() const
{
  std::lock_guard lock{mutex_};
  return refused_.size();
}

bool fault_injecting_runtime::hit(fault_kind kind) noexcept
{
  std::lock_guard lock{mutex_};
  auto const count = ++counts_[static_cast<std::size_t>(kind)];
  if (armed_at_ == 0 || kind != armed_kind_ || count != armed_at_) { return false; }
  armed_at_ = 0;
  fired_    = true;
  return true;
}

void fault_injecting_runtime::maybe_fail(fault_kind kind)
{
  if (!hit(kind)) { return; }
  std::string msg;
  bool oom{};
  cudaError_t status{cudaErrorUnknown};
  if (is_vmm(kind)) {  // as src/runtime/cuda/cuda_vmm.cpp reports a driver failure
    oom = driver_out_of_memory(kind);
    msg = detail::format("virtual memory: ", cuda_call(kind), " failed (fault injected): ",
                         oom ? "CUDA_ERROR_OUT_OF_MEMORY (2)" : "CUDA_ERROR_INVALID_VALUE (1)");
  } else {  // as GPUMEM_CUDA_TRY reports a runtime failure
    status = runtime_status(kind);
    oom    = status == cudaErrorMemoryAllocation;
    msg    = detail::cuda_message(
           __FILE__, __LINE__, detail::format(cuda_call(kind), " (fault injected)").c_str(), status);
  }
  {
    std::lock_guard lock{mutex_};
    message_ = msg;
    status_  = !is_vmm(kind) ? cudaGetErrorName(status)
               : oom         ? "CUDA_ERROR_OUT_OF_MEMORY"
                             : "CUDA_ERROR_INVALID_VALUE";
  }
  if (oom) { throw out_of_memory{msg}; }
  throw cuda_error{status, msg};
}

bool fault_injecting_runtime::holds_refused_mapping(void* base, std::size_t bytes) const noexcept
{
  auto const* lo = static_cast<char const*>(base);
  return std::any_of(refused_.begin(), refused_.end(), [&](refusal const& r) {
    auto const* p = static_cast<char const*>(r.ptr);
    return r.kind == fault_kind::vmm_unmap && p >= lo && p < lo + bytes;
  });
}

bool fault_injecting_runtime::refuse(refusal const& r) noexcept
{
  bool const failed = hit(r.kind);
  std::lock_guard lock{mutex_};
  bool const follows = r.kind == fault_kind::vmm_unreserve && holds_refused_mapping(r.ptr, r.bytes);
  if (!failed && !follows) { return false; }
  if (failed) { message_ = detail::format(cuda_call(r.kind), " (fault injected) refused"); }
  refused_.push_back(r);
  return true;
}

cudaError_t fault_injecting_runtime::pool_status(fault_kind kind) noexcept
{
  if (!hit(kind)) { return cudaSuccess; }
  auto const status = runtime_status(kind);
  std::lock_guard lock{mutex_};
  message_ =
      detail::format(cuda_call(kind), " (fault injected) returned ", cudaGetErrorName(status));
  status_ = cudaGetErrorName(status);
  return status;
}

void fault_injecting_runtime::settle() noexcept
{
  std::vector<refusal> todo;
  {
    std::lock_guard lock{mutex_};
    todo.swap(refused_);
  }
  auto& rt = inner();
  for (auto order :
       {fault_kind::vmm_unmap, fault_kind::vmm_release, fault_kind::free, fault_kind::free_async,
        fault_kind::mem_pool_destroy, fault_kind::event_destroy, fault_kind::vmm_unreserve}) {
    for (auto const& r : todo) {
      if (r.kind != order) { continue; }
      switch (r.kind) {
        case fault_kind::vmm_unmap:
          rt.vmm_unmap(r.ptr, r.bytes);
          break;
        case fault_kind::vmm_release:
          rt.vmm_release(r.handle);
          break;
        case fault_kind::free:
          rt.free(r.memory, r.ptr);
          break;
        case fault_kind::event_destroy:
          rt.event_destroy(static_cast<cudaEvent_t>(r.ptr));
          break;
        case fault_kind::free_async:
          (void)rt.free_async(r.ptr, r.stream);
          break;
        case fault_kind::mem_pool_destroy:
          (void)rt.mem_pool_destroy(static_cast<cudaMemPool_t>(r.ptr));
          break;
        default:
          rt.vmm_unreserve(r.ptr, r.bytes);
          break;
      }
    }
  }
}

// -- the calls ------------------------------------------------------------------------------------

void* fault_injecting_runtime::allocate(detail::memory_kind kind, std::size_t bytes)
{
  maybe_fail(fault_kind::allocate);
  return inner().allocate(kind, bytes);
}

void fault_injecting_runtime::free(detail::memory_kind kind, void* ptr) noexcept
{
  if (ptr != nullptr && refuse({fault_kind::free, kind, ptr})) { return; }
  inner().free(kind, ptr);
}

detail::mem_info fault_injecting_runtime::memory_info()
{
  maybe_fail(fault_kind::memory_info);
  return inner().memory_info();
}

void fault_injecting_runtime::prefetch(void const* ptr, std::size_t bytes,
                                       detail::mem_location where, cudaStream_t stream)
{
  maybe_fail(fault_kind::prefetch);
  inner().prefetch(ptr, bytes, where, stream);
}

void fault_injecting_runtime::advise_preferred_location(void const* ptr, std::size_t bytes,
                                                        detail::mem_location where)
{
  maybe_fail(fault_kind::advise);
  inner().advise_preferred_location(ptr, bytes, where);
}

int fault_injecting_runtime::current_device()
{
  maybe_fail(fault_kind::current_device);
  return inner().current_device();
}

int fault_injecting_runtime::device_attribute(cudaDeviceAttr attr, int device)
{
  maybe_fail(fault_kind::device_attribute);
  return inner().device_attribute(attr, device);
}

cudaEvent_t fault_injecting_runtime::event_create()
{
  maybe_fail(fault_kind::event_create);
  return inner().event_create();
}

void fault_injecting_runtime::event_destroy(cudaEvent_t event) noexcept
{
  if (refuse({fault_kind::event_destroy, {}, static_cast<void*>(event)})) { return; }
  inner().event_destroy(event);
}

void fault_injecting_runtime::event_record(cudaEvent_t event, cudaStream_t stream)
{
  maybe_fail(fault_kind::event_record);
  inner().event_record(event, stream);
}

bool fault_injecting_runtime::event_query(cudaEvent_t event)
{
  maybe_fail(fault_kind::event_query);
  return inner().event_query(event);
}

void fault_injecting_runtime::event_synchronize(cudaEvent_t event)
{
  maybe_fail(fault_kind::event_synchronize);
  inner().event_synchronize(event);
}

void fault_injecting_runtime::stream_wait_event(cudaStream_t stream, cudaEvent_t event)
{
  maybe_fail(fault_kind::stream_wait_event);
  inner().stream_wait_event(stream, event);
}

void fault_injecting_runtime::stream_synchronize(cudaStream_t stream)
{
  maybe_fail(fault_kind::stream_synchronize);
  inner().stream_synchronize(stream);
}

void fault_injecting_runtime::device_synchronize()
{
  maybe_fail(fault_kind::device_synchronize);
  inner().device_synchronize();
}

std::size_t fault_injecting_runtime::vmm_granularity(int device)
{
  maybe_fail(fault_kind::vmm_granularity);
  return inner().vmm_granularity(device);
}

void* fault_injecting_runtime::vmm_reserve(std::size_t bytes, std::size_t alignment)
{
  maybe_fail(fault_kind::vmm_reserve);
  return inner().vmm_reserve(bytes, alignment);
}

void fault_injecting_runtime::vmm_unreserve(void* base, std::size_t bytes) noexcept
{
  if (refuse({fault_kind::vmm_unreserve, {}, base, bytes})) { return; }
  inner().vmm_unreserve(base, bytes);
}

detail::vmm_handle fault_injecting_runtime::vmm_create(std::size_t bytes, int device,
                                                       vmm_handle_properties properties)
{
  maybe_fail(fault_kind::vmm_create);
  return inner().vmm_create(bytes, device, properties);
}

void fault_injecting_runtime::vmm_release(detail::vmm_handle handle) noexcept
{
  if (refuse({fault_kind::vmm_release, {}, nullptr, 0, handle})) { return; }
  inner().vmm_release(handle);
}

void fault_injecting_runtime::vmm_map(void* ptr, std::size_t bytes, detail::vmm_handle handle)
{
  maybe_fail(fault_kind::vmm_map);
  inner().vmm_map(ptr, bytes, handle);
}

void fault_injecting_runtime::vmm_unmap(void* ptr, std::size_t bytes) noexcept
{
  if (refuse({fault_kind::vmm_unmap, {}, ptr, bytes})) { return; }
  inner().vmm_unmap(ptr, bytes);
}

void fault_injecting_runtime::vmm_set_access(void* ptr, std::size_t bytes, int device)
{
  maybe_fail(fault_kind::vmm_set_access);
  inner().vmm_set_access(ptr, bytes, device);
}

int fault_injecting_runtime::vmm_export_fd(detail::vmm_handle handle)
{
  maybe_fail(fault_kind::vmm_export_fd);
  return inner().vmm_export_fd(handle);
}

detail::vmm_handle fault_injecting_runtime::vmm_import_fd(int fd)
{
  maybe_fail(fault_kind::vmm_import_fd);
  return inner().vmm_import_fd(fd);
}

// -- memory pools: a failure is the status; free_async and mem_pool_destroy are refused ----------

cudaError_t fault_injecting_runtime::mem_pool_create(cudaMemPool_t* pool,
                                                     cudaMemPoolProps const* props) noexcept
{
  if (auto const st = pool_status(fault_kind::mem_pool_create); st != cudaSuccess) { return st; }
  return inner().mem_pool_create(pool, props);
}

cudaError_t fault_injecting_runtime::mem_pool_destroy(cudaMemPool_t pool) noexcept
{
  if (refuse({fault_kind::mem_pool_destroy, {}, static_cast<void*>(pool)})) {
    return runtime_status(fault_kind::mem_pool_destroy);
  }
  return inner().mem_pool_destroy(pool);
}

cudaError_t fault_injecting_runtime::mem_pool_set_attribute(cudaMemPool_t pool,
                                                            cudaMemPoolAttr attr,
                                                            void* value) noexcept
{
  if (auto const st = pool_status(fault_kind::mem_pool_set_attribute); st != cudaSuccess) {
    return st;
  }
  return inner().mem_pool_set_attribute(pool, attr, value);
}

cudaError_t fault_injecting_runtime::mem_pool_get_attribute(cudaMemPool_t pool,
                                                            cudaMemPoolAttr attr,
                                                            void* value) noexcept
{
  if (auto const st = pool_status(fault_kind::mem_pool_get_attribute); st != cudaSuccess) {
    return st;
  }
  return inner().mem_pool_get_attribute(pool, attr, value);
}

cudaError_t fault_injecting_runtime::mem_pool_trim_to(cudaMemPool_t pool, std::size_t keep) noexcept
{
  if (auto const st = pool_status(fault_kind::mem_pool_trim_to); st != cudaSuccess) { return st; }
  return inner().mem_pool_trim_to(pool, keep);
}

cudaError_t fault_injecting_runtime::malloc_from_pool_async(void** ptr, std::size_t bytes,
                                                            cudaMemPool_t pool,
                                                            cudaStream_t stream) noexcept
{
  if (auto const st = pool_status(fault_kind::malloc_from_pool_async); st != cudaSuccess) {
    return st;
  }
  return inner().malloc_from_pool_async(ptr, bytes, pool, stream);
}

cudaError_t fault_injecting_runtime::free_async(void* ptr, cudaStream_t stream) noexcept
{
  if (ptr != nullptr && refuse({fault_kind::free_async, {}, ptr, 0, {}, stream})) {
    return runtime_status(fault_kind::free_async);
  }
  return inner().free_async(ptr, stream);
}

cudaError_t fault_injecting_runtime::device_get_default_mem_pool(cudaMemPool_t* pool,
                                                                 int device) noexcept
{
  if (auto const st = pool_status(fault_kind::device_get_default_mem_pool); st != cudaSuccess) {
    return st;
  }
  return inner().device_get_default_mem_pool(pool, device);
}

cudaError_t fault_injecting_runtime::device_get_mem_pool(cudaMemPool_t* pool, int device) noexcept
{
  if (auto const st = pool_status(fault_kind::device_get_mem_pool); st != cudaSuccess) {
    return st;
  }
  return inner().device_get_mem_pool(pool, device);
}

}  // namespace gpumem::test
