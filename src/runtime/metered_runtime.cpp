// Metering of the memory a stack takes from the runtime.
#include <gpumem/runtime/metered_runtime.hpp>

#include <algorithm>
#include <chrono>

namespace gpumem::trace {

std::size_t metered_runtime::peak_held_bytes() const
{
  std::lock_guard lock{mutex_};
  return peak_;
}

void metered_runtime::reset_peak()
{
  std::lock_guard lock{mutex_};
  peak_ = held_.load();
}

std::vector<std::pair<std::uintptr_t, std::size_t>> metered_runtime::chunks() const
{
  std::lock_guard lock{mutex_};
  return {chunks_.begin(), chunks_.end()};
}

std::size_t metered_runtime::chunk_count() const
{
  std::lock_guard lock{mutex_};
  return chunks_.size();
}

void metered_runtime::observe(chunk_observer* observer)
{
  std::lock_guard lock{mutex_};
  observer_ = observer;
}

namespace {

std::uint64_t now_ns() noexcept
{
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace

metered_runtime::call_scope::call_scope(metered_runtime& m, driver_call k) noexcept
    : meter_{m.counts_driver_calls() ? &m : nullptr}, kind_{k}
{
  if (meter_ != nullptr) { start_ = now_ns(); }
}

metered_runtime::call_scope::~call_scope()
{
  if (meter_ == nullptr) { return; }
  auto const i = static_cast<std::size_t>(kind_);
  meter_->calls_[i].fetch_add(1, std::memory_order_relaxed);
  meter_->nanoseconds_[i].fetch_add(now_ns() - start_, std::memory_order_relaxed);
}

driver_call_counts metered_runtime::driver_calls() const noexcept
{
  driver_call_counts c;
  for (std::size_t i = 0; i < driver_call_kinds; ++i) {
    c.of[i] = {calls_[i].load(std::memory_order_relaxed),
               nanoseconds_[i].load(std::memory_order_relaxed)};
  }
  return c;
}

void* metered_runtime::allocate(gpumem::memory_kind kind, std::size_t bytes)
{
  void* p = nullptr;
  {
    call_scope const call{*this, driver_call::malloc};
    p = inner().allocate(kind, bytes);
  }
  std::lock_guard lock{mutex_};
  add_chunk(reinterpret_cast<std::uintptr_t>(p), bytes);
  held_.store(held_.load() + bytes);
  peak_ = std::max(peak_, held_.load());
  return p;
}

void metered_runtime::add_chunk(std::uintptr_t address, std::size_t bytes)
{
  chunks_.emplace(address, bytes);
  if (observer_ != nullptr) { observer_->chunk_added(address, bytes); }
}

void metered_runtime::remove_chunk(std::uintptr_t address) noexcept
{
  auto it = chunks_.find(address);
  if (it == chunks_.end()) { return; }
  if (observer_ != nullptr) { observer_->chunk_removed(it->first, it->second); }
  chunks_.erase(it);
}

gpumem::vmm_handle metered_runtime::vmm_create(std::size_t bytes, int device,
                                               gpumem::vmm_handle_properties properties)
{
  gpumem::vmm_handle handle{};
  {
    call_scope const call{*this, driver_call::create};
    handle = inner().vmm_create(bytes, device, properties);
  }
  std::lock_guard lock{mutex_};
  handles_.emplace(handle, bytes);
  held_.store(held_.load() + bytes);
  peak_ = std::max(peak_, held_.load());
  return handle;
}

void metered_runtime::vmm_release(gpumem::vmm_handle handle) noexcept
{
  {
    std::lock_guard lock{mutex_};
    if (auto it = handles_.find(handle); it != handles_.end()) {
      held_.store(held_.load() - it->second);
      handles_.erase(it);
    }
  }
  call_scope const call{*this, driver_call::release};
  inner().vmm_release(handle);
}

void metered_runtime::vmm_map(void* ptr, std::size_t bytes, gpumem::vmm_handle handle)
{
  {
    call_scope const call{*this, driver_call::map};
    inner().vmm_map(ptr, bytes, handle);
  }
  maps_.store(true, std::memory_order_relaxed);
  std::lock_guard lock{mutex_};
  add_chunk(reinterpret_cast<std::uintptr_t>(ptr), bytes);
}

void metered_runtime::vmm_unmap(void* ptr, std::size_t bytes) noexcept
{
  {
    std::lock_guard lock{mutex_};
    remove_chunk(reinterpret_cast<std::uintptr_t>(ptr));
  }
  call_scope const call{*this, driver_call::unmap};
  inner().vmm_unmap(ptr, bytes);
}

void metered_runtime::free(gpumem::memory_kind kind, void* ptr) noexcept
{
  {
    std::lock_guard lock{mutex_};
    auto it = chunks_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it != chunks_.end()) {
      held_.store(held_.load() - it->second);
      remove_chunk(it->first);
    }
  }
  call_scope const call{*this, driver_call::free};
  inner().free(kind, ptr);
}

// -- counted only ---------------------------------------------------------------------------------

bool metered_runtime::vmm_unmap_run(void* ptr, std::size_t bytes) noexcept
{
  call_scope const call{*this, driver_call::unmap};
  return inner().vmm_unmap_run(ptr, bytes);
}

void metered_runtime::vmm_set_access(void* ptr, std::size_t bytes, int device)
{
  call_scope const call{*this, driver_call::set_access};
  inner().vmm_set_access(ptr, bytes, device);
}

void* metered_runtime::vmm_reserve(std::size_t bytes, std::size_t alignment)
{
  call_scope const call{*this, driver_call::other};
  return inner().vmm_reserve(bytes, alignment);
}

void metered_runtime::vmm_unreserve(void* base, std::size_t bytes) noexcept
{
  call_scope const call{*this, driver_call::other};
  inner().vmm_unreserve(base, bytes);
}

std::size_t metered_runtime::vmm_granularity(int device)
{
  call_scope const call{*this, driver_call::other};
  return inner().vmm_granularity(device);
}

cudaError_t metered_runtime::malloc_from_pool_async(void** ptr, std::size_t bytes,
                                                    cudaMemPool_t pool,
                                                    cudaStream_t stream) noexcept
{
  call_scope const call{*this, driver_call::alloc_async};
  return inner().malloc_from_pool_async(ptr, bytes, pool, stream);
}

cudaError_t metered_runtime::free_async(void* ptr, cudaStream_t stream) noexcept
{
  call_scope const call{*this, driver_call::free_async};
  return inner().free_async(ptr, stream);
}

cudaError_t metered_runtime::mem_pool_trim_to(cudaMemPool_t pool, std::size_t keep) noexcept
{
  call_scope const call{*this, driver_call::other};
  return inner().mem_pool_trim_to(pool, keep);
}

cudaEvent_t metered_runtime::event_create()
{
  call_scope const call{*this, driver_call::other};
  return inner().event_create();
}

void metered_runtime::event_destroy(cudaEvent_t event) noexcept
{
  call_scope const call{*this, driver_call::other};
  inner().event_destroy(event);
}

void metered_runtime::event_record(cudaEvent_t event, cudaStream_t stream)
{
  call_scope const call{*this, driver_call::event_record};
  inner().event_record(event, stream);
}

bool metered_runtime::event_query(cudaEvent_t event)
{
  call_scope const call{*this, driver_call::event_query};
  return inner().event_query(event);
}

void metered_runtime::event_synchronize(cudaEvent_t event)
{
  call_scope const call{*this, driver_call::event_synchronize};
  inner().event_synchronize(event);
}

bool metered_runtime::stream_capturing(cudaStream_t stream)
{
  call_scope const call{*this, driver_call::other};
  return inner().stream_capturing(stream);
}

void metered_runtime::stream_wait_event(cudaStream_t stream, cudaEvent_t event)
{
  call_scope const call{*this, driver_call::stream_wait};
  inner().stream_wait_event(stream, event);
}

void metered_runtime::stream_synchronize(cudaStream_t stream)
{
  call_scope const call{*this, driver_call::stream_synchronize};
  inner().stream_synchronize(stream);
}

void metered_runtime::device_synchronize()
{
  call_scope const call{*this, driver_call::device_synchronize};
  inner().device_synchronize();
}

void metered_runtime::memcpy_async(void* dst, void const* src, std::size_t bytes,
                                   cudaStream_t stream)
{
  call_scope const call{*this, driver_call::other};
  inner().memcpy_async(dst, src, bytes, stream);
}

void metered_runtime::memset_async(void* dst, int value, std::size_t bytes, cudaStream_t stream)
{
  call_scope const call{*this, driver_call::other};
  inner().memset_async(dst, value, bytes, stream);
}

}  // namespace gpumem::trace
