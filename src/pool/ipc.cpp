// IPC: interprocess events, imported pools, imported and exported allocations.
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>
#include <gpumem/pool/ipc.hpp>
#include <gpumem/pool/ipc_event.hpp>
#include <gpumem/pool/pointer_query.hpp>
#include <gpumem/pool/pool_capabilities.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

namespace gpumem::pools {
namespace {

[[noreturn]] void throw_cuda(cudaError_t status, std::string const& msg)
{
  detail::throw_cuda_failure(status, msg);
}

void check(cudaError_t status, char const* what)
{
  if (status != cudaSuccess) [[unlikely]] { throw_cuda(status, what); }
}

/// Imports of one pool in this process. The driver gives the same handle each time a process
/// imports a pool again (seen on the H100, driver 580), so the handle is destroyed only with the
/// last imported_memory_pool that holds it.
class import_counts {
 public:
  void add(cudaMemPool_t pool)
  {
    std::lock_guard lock{mutex_};
    ++counts_[pool];
  }
  /// True when `pool` has no other holder left (then it must be destroyed).
  bool remove(cudaMemPool_t pool) noexcept
  {
    std::lock_guard lock{mutex_};
    auto it = counts_.find(pool);
    if (it != counts_.end() && --it->second > 0) { return false; }
    if (it != counts_.end()) { counts_.erase(it); }
    return true;
  }

 private:
  std::mutex mutex_;
  std::map<cudaMemPool_t, int> counts_;
};

import_counts& imports()
{
  static import_counts instance;
  return instance;
}

cudaMemPool_t import_pool_handle(gpumem::runtime& rt, shareable_pool_handle const& handle)
{
  cudaMemPool_t pool{};
  if (handle.type() == allocation_handle_type::posix_file_descriptor) {
    GPUMEM_EXPECTS(handle.fd() >= 0, logic_error,
                   "cannot import a memory pool from an empty file descriptor");
    auto const st = rt.mem_pool_import_from_shareable_handle(
        &pool, reinterpret_cast<void*>(static_cast<std::intptr_t>(handle.fd())),
        cudaMemHandleTypePosixFileDescriptor);
    if (st != cudaSuccess) {
      throw_cuda(st,
                 detail::format("cannot import a memory pool from file descriptor ", handle.fd(),
                                " (it must be a descriptor exported by memory_pool::"
                                "export_handle in another process, received over a Unix "
                                "socket)"));
    }
    return pool;
  }
  GPUMEM_EXPECTS(
      handle.type() == allocation_handle_type::fabric, logic_error,
      detail::format("cannot import a memory pool from a ", to_string(handle.type()), " handle"));
  auto fabric = handle.fabric();
  auto const st =
      rt.mem_pool_import_from_shareable_handle(&pool, fabric.bytes.data(), cudaMemHandleTypeFabric);
  if (st != cudaSuccess) {
    auto const why = why_fabric_unavailable();
    throw_cuda(st, "cannot import a memory pool from a fabric handle" +
                       (why.empty() ? std::string{} : " (" + why + ")"));
  }
  return pool;
}

cudaMemPool_t import_pool(gpumem::runtime& rt, shareable_pool_handle const& handle)
{
  auto const pool = import_pool_handle(rt, handle);
  imports().add(pool);
  return pool;
}

}  // namespace

// -- ipc_event -----------------------------------------------------------------------------------

ipc_event ipc_event::create()
{
  cudaEvent_t event{};
  check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventInterprocess),
        "creating an interprocess event");
  return ipc_event{event, -1};
}

ipc_event ipc_event::open(ipc_event_handle const& handle)
{
  cudaIpcEventHandle_t h{};
  static_assert(sizeof h == sizeof handle.bytes);
  std::memcpy(&h, handle.bytes.data(), sizeof h);
  int device{};
  check(cudaGetDevice(&device), "finding the current device to open an IPC event on");
  cudaEvent_t event{};
  check(cudaIpcOpenEventHandle(&event, h),
        "cannot open IPC event handle (it must come from ipc_event::handle() in another, still "
        "running process)");
  return ipc_event{event, device};
}

ipc_event::ipc_event(ipc_event&& other) noexcept
    : event_{std::exchange(other.event_, nullptr)}, opened_on_{std::exchange(other.opened_on_, -1)}
{
}

ipc_event& ipc_event::operator=(ipc_event&& other) noexcept
{
  if (this != &other) {
    if (event_ != nullptr) { GPUMEM_CUDA_TRY_NOEXCEPT(cudaEventDestroy(event_)); }
    event_     = std::exchange(other.event_, nullptr);
    opened_on_ = std::exchange(other.opened_on_, -1);
  }
  return *this;
}

ipc_event::~ipc_event()
{
  if (event_ != nullptr) { GPUMEM_CUDA_TRY_NOEXCEPT(cudaEventDestroy(event_)); }
}

ipc_event_handle ipc_event::handle() const
{
  cudaIpcEventHandle_t h{};
  check(cudaIpcGetEventHandle(&h, event_), "cudaIpcGetEventHandle");
  ipc_event_handle out{};
  std::memcpy(out.bytes.data(), &h, sizeof h);
  return out;
}

void ipc_event::record(cuda_stream_view stream) const
{
  check(cudaEventRecord(event_, stream.value()), "recording an IPC event");
}

void ipc_event::make_wait(cuda_stream_view stream) const
{
  if (opened_on_ >= 0) {
    int device{};
    check(cudaStreamGetDevice(stream.value(), &device), "finding the device of a stream");
    GPUMEM_EXPECTS(device == opened_on_, logic_error,
                   detail::format("ipc_event::make_wait: the event was opened on device ",
                                  opened_on_, " and cannot be waited on by a stream of device ",
                                  device, "; open it with device ", device, " current"));
  }
  check(cudaStreamWaitEvent(stream.value(), event_, 0), "waiting on an IPC event");
}

void ipc_event::synchronize() const
{
  check(cudaEventSynchronize(event_), "synchronizing an IPC event");
}

// -- imported_memory_pool ------------------------------------------------------------------------

imported_memory_pool::imported_memory_pool(shareable_pool_handle const& handle, gpumem::runtime& rt)
    : pool_{import_pool(rt, handle)}, runtime_{&rt}
{
  try {
    home_ = detail::find_pool_home(rt, pool_);
  } catch (...) {
    destroy();
    throw;
  }
}

imported_memory_pool::imported_memory_pool(shareable_pool_handle const& handle, pool_location home,
                                           gpumem::runtime& rt)
    : pool_{import_pool(rt, handle)}, runtime_{&rt}
{
  if (home.kind == location_kind::none) { return; }  // "home unknown": CUDA decides on access
  try {
    if (home.kind == location_kind::device) {
      // The exporter's device number is in its own numbering (CUDA_VISIBLE_DEVICES may differ
      // here). Refuse what is visibly wrong rather than grant access to the wrong device later.
      int const count = rt.device_count();
      GPUMEM_EXPECTS(
          home.id >= 0 && home.id < count, logic_error,
          detail::format("imported_memory_pool: home ", to_string(home),
                         " does not exist in this process (", count,
                         " visible devices); the exporter numbers its devices differently (e.g. "
                         "CUDA_VISIBLE_DEVICES); import without a location, or with "
                         "pool_location::none() for an unknown home"));
      auto const found = detail::find_pool_home(rt, pool_);
      GPUMEM_EXPECTS(
          !found.has_value() || *found == home, logic_error,
          detail::format("imported_memory_pool: the pool's memory is on ", to_string(*found),
                         " of this process, not on the given home ", to_string(home),
                         "; the exporter numbers its devices differently (e.g. "
                         "CUDA_VISIBLE_DEVICES); import without a location"));
    }
    home_ = home;
  } catch (...) {
    destroy();
    throw;
  }
}

imported_memory_pool::imported_memory_pool(imported_memory_pool&& other) noexcept
    : pool_{std::exchange(other.pool_, nullptr)},
      home_{std::exchange(other.home_, std::nullopt)},
      runtime_{other.runtime_}
{
}

imported_memory_pool& imported_memory_pool::operator=(imported_memory_pool&& other) noexcept
{
  if (this != &other) {
    destroy();
    pool_    = std::exchange(other.pool_, nullptr);
    home_    = std::exchange(other.home_, std::nullopt);
    runtime_ = other.runtime_;
  }
  return *this;
}

imported_memory_pool::~imported_memory_pool()
{
  destroy();
}

void imported_memory_pool::destroy() noexcept
{
  if (pool_ != nullptr && imports().remove(pool_)) { (void)runtime_->mem_pool_destroy(pool_); }
  pool_ = nullptr;
}

void imported_memory_pool::set_access(cuda_device_id device, access_flags flags) const
{
  GPUMEM_EXPECTS(pool_ != nullptr, logic_error, "set_access: the imported pool is empty");
  // With the home unknown (not visible to this process, or imported with pool_location::none())
  // there is no peer capability to check against: CUDA decides, and its refusal is reported.
  detail::set_pool_access(*runtime_, pool_, home_.value_or(pool_location::none()), device, flags);
}

imported_allocation imported_memory_pool::import_pointer(pointer_export_data const& data,
                                                         std::size_t bytes) const
{
  GPUMEM_EXPECTS(pool_ != nullptr, logic_error, "import_pointer: the imported pool is empty");
  cudaMemPoolPtrExportData raw{};
  static_assert(sizeof raw == sizeof data.bytes);
  std::memcpy(&raw, data.bytes.data(), sizeof raw);
  void* ptr{};
  check(runtime_->mem_pool_import_pointer(&ptr, pool_, &raw),
        "cannot import a pointer: the export data must come from exported_allocation::"
        "export_data() of an allocation of this pool that is still live in the exporter");
  return imported_allocation{ptr, bytes, *runtime_};
}

// -- imported_allocation -------------------------------------------------------------------------

imported_allocation::imported_allocation(imported_allocation&& other) noexcept
    : ptr_{std::exchange(other.ptr_, nullptr)},
      bytes_{std::exchange(other.bytes_, 0)},
      runtime_{other.runtime_}
{
}

imported_allocation& imported_allocation::operator=(imported_allocation&& other) noexcept
{
  if (this != &other) {
    this->~imported_allocation();
    ptr_     = std::exchange(other.ptr_, nullptr);
    bytes_   = std::exchange(other.bytes_, 0);
    runtime_ = other.runtime_;
  }
  return *this;
}

imported_allocation::~imported_allocation()
{
  if (ptr_ == nullptr) { return; }
  try {
    runtime_->device_synchronize();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor cannot report; free anyway
  }
  runtime_->free(gpumem::memory_kind::device, ptr_);  // cudaFree
  ptr_ = nullptr;
}

void imported_allocation::free_async(cuda_stream_view stream, ipc_event const& freed)
{
  GPUMEM_EXPECTS(ptr_ != nullptr, logic_error, "imported_allocation::free_async: already freed");
  check(runtime_->free_async(ptr_, stream.value()), "freeing an imported allocation");
  ptr_ = nullptr;
  freed.record(stream);
}

// -- export_pointer
// --------------------------------------------------------------------------------

pointer_export_data export_pointer(void const* ptr, gpumem::runtime& rt)
{
  GPUMEM_EXPECTS(ptr != nullptr, logic_error, "export_pointer: the pointer is null");
  auto const info = query_pointer(ptr, rt);
  GPUMEM_EXPECTS(info.from_pool(), logic_error,
                 detail::format("export_pointer(", ptr,
                                "): not memory of a stream-ordered pool (only allocations of an "
                                "IPC-capable memory pool can be exported)"));
  cudaMemPoolPtrExportData raw{};
  auto const st = rt.mem_pool_export_pointer(&raw, const_cast<void*>(ptr));
  if (st != cudaSuccess) {
    throw_cuda(st, detail::format("export_pointer(", ptr, "): CUDA refused to export it from pool ",
                                  static_cast<void*>(info.pool),
                                  "; the pool must be created with an IPC handle type and shared "
                                  "(memory_pool::export_handle) before its allocations"));
  }
  pointer_export_data out{};
  std::memcpy(out.bytes.data(), &raw, sizeof raw);
  return out;
}

// -- exported_allocation -------------------------------------------------------------------------

exported_allocation::exported_allocation(memory_pool const& pool, std::size_t bytes,
                                         cuda_stream_view stream)
    : pool_{&pool}, bytes_{bytes}, stream_{stream.value()}
{
  GPUMEM_EXPECTS(!pool.properties().handle_types.empty(), logic_error,
                 "exported_allocation needs an IPC-capable pool; this pool has handle types "
                 "{none}");
  ptr_ = pool.allocate(bytes, stream);
}

exported_allocation::exported_allocation(exported_allocation&& other) noexcept
    : pool_{other.pool_},
      ptr_{std::exchange(other.ptr_, nullptr)},
      bytes_{std::exchange(other.bytes_, 0)},
      stream_{other.stream_},
      shared_{std::exchange(other.shared_, false)}
{
}

exported_allocation& exported_allocation::operator=(exported_allocation&& other) noexcept
{
  if (this != &other) {
    this->~exported_allocation();
    pool_   = other.pool_;
    ptr_    = std::exchange(other.ptr_, nullptr);
    bytes_  = std::exchange(other.bytes_, 0);
    stream_ = other.stream_;
    shared_ = std::exchange(other.shared_, false);
  }
  return *this;
}

exported_allocation::~exported_allocation()
{
  if (ptr_ == nullptr) { return; }
  if (!shared_) {
    (void)pool_->runtime().free_async(ptr_, stream_);
  } else {
    std::fprintf(stderr,
                 "gpumem: exported_allocation %p (%zu bytes) was shared and never freed with "
                 "free_after(); leaking it rather than freeing before the importers\n",
                 ptr_, bytes_);
  }
  ptr_ = nullptr;
}

pointer_export_data exported_allocation::export_data()
{
  GPUMEM_EXPECTS(ptr_ != nullptr, logic_error, "export_data: the allocation was freed");
  try {
    auto out = export_pointer(ptr_, pool_->runtime());
    shared_  = true;
    return out;
  } catch (cuda_error const& e) {
    if (pool_->exported()) { throw; }
    throw_cuda(e.status(),
               "cudaMemPoolExportPointer refused the allocation: its pool has not been "
               "exported yet; share the pool first (memory_pool::export_handle), then "
               "its allocations");
  }
}

void exported_allocation::free_after(ipc_event const& importer_freed, cuda_stream_view stream)
{
  GPUMEM_EXPECTS(ptr_ != nullptr, logic_error, "free_after: the allocation was already freed");
  importer_freed.make_wait(stream);
  check(pool_->runtime().free_async(ptr_, stream.value()), "freeing an exported allocation");
  ptr_    = nullptr;
  shared_ = false;
}

void exported_allocation::free_unshared(cuda_stream_view stream)
{
  GPUMEM_EXPECTS(ptr_ != nullptr, logic_error, "free_unshared: the allocation was already freed");
  GPUMEM_EXPECTS(!shared_, logic_error,
                 "free_unshared: the allocation was shared (export_data() was taken); free it "
                 "with free_after(importer_freed_event, stream) so importers free first");
  check(pool_->runtime().free_async(ptr_, stream.value()), "freeing an exported allocation");
  ptr_ = nullptr;
}

}  // namespace gpumem::pools
