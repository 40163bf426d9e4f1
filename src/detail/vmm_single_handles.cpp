// Single-handle allocations of the virtual-memory pool. See detail/vmm_single_handles.hpp.
#include <gpumem/align.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/vmm_single_handles.hpp>
#include <gpumem/error.hpp>

#include <exception>
#include <utility>

namespace gpumem::detail {

vmm_single_handles::vmm_single_handles(runtime& rt, int device, std::vector<int> peers,
                                       std::size_t granularity, vmm_handle_properties properties)
    : runtime_{&rt}, devices_{std::move(peers)}, granularity_{granularity}, properties_{properties}
{
  properties_.shareable = true;
  devices_.insert(devices_.begin(), device);
}

vmm_single_handles::~vmm_single_handles()
{
  release_passed(true);
  std::lock_guard lock{mutex_};
  for (auto const& [ptr, a] : live_) { destroy(ptr, a); }  // never freed: the owner is gone
  // Still waiting only when the synchronization failed (the device failed): nothing could free
  // them after the owner is gone, so they go now, as the pool's own memory does.
  for (auto const& w : waiting_) {
    if (w.event != nullptr) { runtime_->event_destroy(w.event); }
    destroy(w.ptr, w.a);
  }
}

void* vmm_single_handles::allocate(std::size_t bytes)
{
  GPUMEM_EXPECTS(bytes > 0, logic_error, "cannot allocate a single handle of 0 bytes");
  GPUMEM_EXPECTS(can_align_up(bytes, granularity_), out_of_memory,
                 format("cannot allocate ", bytes_str(bytes), " as a single handle: too large"));
  auto const size   = align_up(bytes, granularity_);
  auto const handle = runtime_->vmm_create(size, devices_.front(), properties_);
  char* at{};
  try {
    at = static_cast<char*>(map_whole(*runtime_, handle, size, granularity_, devices_));
    std::lock_guard lock{mutex_};
    live_.emplace(at, allocation{size, bytes, handle});
    count_.store(live_.size() + waiting_.size(), std::memory_order_relaxed);
  } catch (...) {
    if (at != nullptr) { unmap_whole(*runtime_, at, size); }
    runtime_->vmm_release(handle);
    throw;
  }
  return at;
}

std::optional<std::size_t> vmm_single_handles::deallocate(void* ptr, cudaStream_t stream) noexcept
{
  std::lock_guard lock{mutex_};
  auto const it = live_.find(static_cast<char*>(ptr));
  if (it == live_.end()) { return std::nullopt; }
  waiting w{it->first, it->second, nullptr};
  auto const requested = w.a.requested;
  try {
    waiting_.reserve(waiting_.size() + 1);  // the push below cannot fail
  } catch (std::bad_alloc const&) {         // no room to wait: free once the stream is done
    try {
      runtime_->stream_synchronize(stream);
    } catch (...) {  // the device failed: the memory stays mapped until the destructor
      return requested;
    }
    destroy(w.ptr, w.a);
    live_.erase(it);
    count_.store(live_.size() + waiting_.size(), std::memory_order_relaxed);
    return requested;
  }
  try {
    w.event = runtime_->event_create();
    runtime_->event_record(w.event, stream);
  } catch (...) {  // no event: released at the next device synchronization (release_passed)
    if (w.event != nullptr) { runtime_->event_destroy(w.event); }
    w.event = nullptr;
  }
  waiting_.push_back(w);
  live_.erase(it);
  return requested;
}

bool vmm_single_handles::passed(waiting const& w, bool wait) noexcept
{
  try {
    if (w.event == nullptr) {
      if (wait) { runtime_->device_synchronize(); }
      return wait;
    }
    if (wait) {
      runtime_->event_synchronize(w.event);
      return true;
    }
    return runtime_->event_query(w.event);
  } catch (...) {  // the device failed: keep the memory mapped (nothing safe can be done)
    return false;
  }
}

std::size_t vmm_single_handles::release_passed(bool wait) noexcept
{
  std::lock_guard lock{mutex_};
  std::size_t released{};
  std::erase_if(waiting_, [&](waiting const& w) {
    if (!passed(w, wait)) { return false; }
    if (w.event != nullptr) { runtime_->event_destroy(w.event); }
    destroy(w.ptr, w.a);
    released += w.a.bytes;
    return true;
  });
  count_.store(live_.size() + waiting_.size(), std::memory_order_relaxed);
  return released;
}

void vmm_single_handles::destroy(char* ptr, allocation const& a) noexcept
{
  unmap_whole(*runtime_, ptr, a.bytes);
  runtime_->vmm_release(a.handle);
}

void* map_whole(runtime& rt, vmm_handle handle, std::size_t bytes, std::size_t alignment,
                std::span<int const> devices)
{
  void* at    = rt.vmm_reserve(bytes, alignment);
  bool mapped = false;
  try {
    rt.vmm_map(at, bytes, handle);
    mapped = true;
    for (int d : devices) { rt.vmm_set_access(at, bytes, d); }
  } catch (...) {
    if (mapped) { rt.vmm_unmap(at, bytes); }
    rt.vmm_unreserve(at, bytes);
    throw;
  }
  return at;
}

void unmap_whole(runtime& rt, void* ptr, std::size_t bytes) noexcept
{
  rt.vmm_unmap(ptr, bytes);
  rt.vmm_unreserve(ptr, bytes);
}

std::pair<int, std::size_t> vmm_single_handles::export_fd(void const* ptr) const
{
  std::lock_guard lock{mutex_};
  auto const it = live_.find(static_cast<char*>(const_cast<void*>(ptr)));
  GPUMEM_EXPECTS(it != live_.end(), logic_error,
                 format("cannot export ", ptr,
                        ": not a live allocation of allocate_single_handle on this pool"));
  return {runtime_->vmm_export_fd(it->second.handle), it->second.bytes};
}

std::size_t vmm_single_handles::mapped_bytes() const
{
  std::lock_guard lock{mutex_};
  std::size_t sum{};
  for (auto const& [ptr, a] : live_) { sum += a.bytes; }
  for (auto const& w : waiting_) { sum += w.a.bytes; }
  return sum;
}

void vmm_single_handles::check() const
{
  std::lock_guard lock{mutex_};
  GPUMEM_EXPECTS(count_.load() == live_.size() + waiting_.size(), logic_error,
                 format("single-handle allocations: count ", count_.load(), " != live ",
                        live_.size(), " + waiting ", waiting_.size()));
  auto check_one = [&](char const* ptr, allocation const& a) {
    GPUMEM_EXPECTS(a.bytes > 0 && a.bytes % granularity_ == 0 && a.requested <= a.bytes &&
                       a.handle != vmm_handle{},
                   logic_error,
                   format("single-handle allocation at ", static_cast<void const*>(ptr), ": ",
                          a.bytes, " bytes mapped for ", a.requested, " requested"));
  };
  for (auto const& [ptr, a] : live_) { check_one(ptr, a); }
  for (auto const& w : waiting_) { check_one(w.ptr, w.a); }
}

}  // namespace gpumem::detail
