// Metering of the memory a stack takes from the runtime.
#include <gpumem/trace/metered_runtime.hpp>

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

void* metered_runtime::allocate(detail::memory_kind kind, std::size_t bytes)
{
  void* p = inner_->allocate(kind, bytes);
  std::lock_guard lock{mutex_};
  chunks_.emplace(reinterpret_cast<std::uintptr_t>(p), bytes);
  if (observer_ != nullptr) { observer_->chunk_added(reinterpret_cast<std::uintptr_t>(p), bytes); }
  held_.store(held_.load() + bytes);
  peak_ = std::max(peak_, held_.load());
  return p;
}

void metered_runtime::free(detail::memory_kind kind, void* ptr) noexcept
{
  {
    std::lock_guard lock{mutex_};
    auto it = chunks_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it != chunks_.end()) {
      held_.store(held_.load() - it->second);
      if (observer_ != nullptr) { observer_->chunk_removed(it->first, it->second); }
      chunks_.erase(it);
    }
  }
  inner_->free(kind, ptr);
}

}  // namespace gpumem::trace
