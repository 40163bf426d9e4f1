// Metering of the memory a stack takes from the runtime.
#include <gpumem/runtime/metered_runtime.hpp>

#include <algorithm>

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

void* metered_runtime::allocate(gpumem::memory_kind kind, std::size_t bytes)
{
  void* p = inner().allocate(kind, bytes);
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

gpumem::vmm_handle metered_runtime::vmm_create(std::size_t bytes, int device, bool shareable)
{
  auto const handle = inner().vmm_create(bytes, device, shareable);
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
  inner().vmm_release(handle);
}

void metered_runtime::vmm_map(void* ptr, std::size_t bytes, gpumem::vmm_handle handle)
{
  inner().vmm_map(ptr, bytes, handle);
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
  inner().free(kind, ptr);
}

}  // namespace gpumem::trace
