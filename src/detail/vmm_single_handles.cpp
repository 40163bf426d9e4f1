// Single-handle allocations of the virtual-memory pool. See detail/vmm_single_handles.hpp.
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/vmm_single_handles.hpp>
#include <gpumem/error.hpp>

#include <exception>
#include <utility>

namespace gpumem::detail {

vmm_single_handles::vmm_single_handles(runtime& rt, int device, std::vector<int> peers,
                                       std::size_t granularity)
    : runtime_{&rt}, device_{device}, peers_{std::move(peers)}, granularity_{granularity}
{
}

vmm_single_handles::~vmm_single_handles()
{
  release_passed(true);
  std::lock_guard lock{mutex_};
  for (auto const& [ptr, a] : live_) { destroy(ptr, a); }  // never freed: the owner is gone
}

void* vmm_single_handles::allocate(std::size_t bytes)
{
  GPUMEM_EXPECTS(bytes > 0, logic_error, "cannot allocate a single handle of 0 bytes");
  GPUMEM_EXPECTS(can_align_up(bytes, granularity_), out_of_memory,
                 format("cannot allocate ", bytes_str(bytes), " as a single handle: too large"));
  auto const size = align_up(bytes, granularity_);
  auto* at        = static_cast<char*>(runtime_->vmm_reserve(size, granularity_));
  vmm_handle handle{};
  int mapped = 0;  // steps done, undone in reverse on a failure
  try {
    handle = runtime_->vmm_create(size, device_, true);
    runtime_->vmm_map(at, size, handle);
    mapped = 1;
    runtime_->vmm_set_access(at, size, device_);
    for (int peer : peers_) { runtime_->vmm_set_access(at, size, peer); }
    std::lock_guard lock{mutex_};
    live_.emplace(at, allocation{size, bytes, handle});
    count_.store(live_.size() + waiting_.size(), std::memory_order_relaxed);
  } catch (...) {
    if (mapped != 0) { runtime_->vmm_unmap(at, size); }
    if (handle != vmm_handle{}) { runtime_->vmm_release(handle); }
    runtime_->vmm_unreserve(at, size);
    throw;
  }
  return at;
}

bool vmm_single_handles::free_located(void* ptr, std::size_t, cudaStream_t stream,
                                      std::size_t& requested) noexcept
{
  std::lock_guard lock{mutex_};
  auto const it = live_.find(static_cast<char*>(ptr));
  if (it == live_.end()) { return false; }
  waiting w{it->first, it->second, nullptr};
  requested = w.a.requested;
  try {
    waiting_.reserve(waiting_.size() + 1);  // the push below cannot fail
  } catch (std::bad_alloc const&) {         // no room to wait: free once the stream is done
    try {
      runtime_->stream_synchronize(stream);
    } catch (...) {  // the device failed: the memory stays mapped until the destructor
      return true;
    }
    destroy(w.ptr, w.a);
    live_.erase(it);
    count_.store(live_.size() + waiting_.size(), std::memory_order_relaxed);
    return true;
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
  return true;
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
  runtime_->vmm_unmap(ptr, a.bytes);
  runtime_->vmm_release(a.handle);
  runtime_->vmm_unreserve(ptr, a.bytes);
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
