// The virtual-memory pool's listeners. See detail/vmm_listeners.hpp.
#include <gpumem/detail/vmm_listeners.hpp>
#include <gpumem/error.hpp>

#include <algorithm>

namespace gpumem::detail {

vmm_listener_id vmm_listeners::add(bool mapped, vmm_mapping_listener fn)
{
  GPUMEM_EXPECTS(static_cast<bool>(fn), logic_error,
                 "vmm_pool_memory_resource: a map or unmap listener must be callable (got empty)");
  auto shared = std::make_shared<vmm_mapping_listener const>(std::move(fn));
  std::lock_guard lock{mutex_};
  auto const id = next_id_++;
  entries_.push_back({id, mapped, std::move(shared)});
  count_.store(entries_.size(), std::memory_order_relaxed);
  return id;
}

bool vmm_listeners::remove(vmm_listener_id id) noexcept
{
  std::lock_guard lock{mutex_};
  auto const it =
      std::find_if(entries_.begin(), entries_.end(), [&](entry const& e) { return e.id == id; });
  if (it == entries_.end()) { return false; }
  entries_.erase(it);
  count_.store(entries_.size(), std::memory_order_relaxed);
  return true;
}

void vmm_listeners::notify(std::vector<vmm_mapping_event> const& events) noexcept
{
  if (events.empty()) { return; }
  std::vector<entry> now;
  try {
    std::lock_guard lock{mutex_};
    now = entries_;
  } catch (...) {  // host memory exhausted: the events cannot be delivered
    failures_.fetch_add(1);
    return;
  }
  for (auto const& event : events) {
    for (auto const& e : now) {
      if (e.mapped != event.mapped) { continue; }
      try {
        (*e.fn)(event);
      } catch (...) {
        failures_.fetch_add(1);
      }
    }
  }
}

void vmm_listeners::queue(std::vector<vmm_mapping_event> events) noexcept
{
  if (events.empty()) { return; }
  std::lock_guard lock{mutex_};
  try {
    queue_.insert(queue_.end(), std::make_move_iterator(events.begin()),
                  std::make_move_iterator(events.end()));
  } catch (...) {
    failures_.fetch_add(1);
  }
  pending_.store(!queue_.empty(), std::memory_order_relaxed);
}

void vmm_listeners::deliver() noexcept
{
  std::vector<vmm_mapping_event> events;
  {
    std::lock_guard lock{mutex_};
    events.swap(queue_);
    pending_.store(false, std::memory_order_relaxed);
  }
  notify(events);
}

}  // namespace gpumem::detail
