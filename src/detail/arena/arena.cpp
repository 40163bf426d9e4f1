// One arena: first fit over its superblocks, growth from the global arena, surplus release.
#include <gpumem/detail/arena/arena.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>

#include <ostream>

namespace gpumem::detail::arena {

arena::arena(global_arena& global, cudaStream_t stream, cudaEvent_t release_event, char const* kind)
    : global_{&global}, stream_{stream}, release_event_{release_event}, kind_{kind}
{
}

void* arena::allocate(std::size_t bytes)
{
  std::lock_guard lock{mutex_};
  for (auto& [base, sb] : superblocks_) {
    if (sb.free_bytes() < bytes) { continue; }
    bool const was_empty = sb.empty();
    if (auto const addr = sb.allocate(bytes); addr != 0) {
      if (was_empty) { --empty_count_; }
      return reinterpret_cast<void*>(addr);
    }
  }
  return grow_and_allocate(bytes);
}

void* arena::grow_and_allocate(std::size_t bytes)
{
  auto const range = global_->acquire(bytes, superblock_bytes, party());
  if (range.size == 0) { return nullptr; }
  try {
    auto it = superblocks_.try_emplace(range.base, range.base, range.size).first;
    held_bytes_ += range.size;
    return reinterpret_cast<void*>(it->second.allocate(bytes));
  } catch (...) {
    global_->release(range, party(), false);
    throw;
  }
}

arena::superblock_map::iterator arena::find(std::uintptr_t addr)
{
  auto it = superblocks_.upper_bound(addr);
  if (it == superblocks_.begin()) { return superblocks_.end(); }
  --it;
  return it->second.contains(addr) ? it : superblocks_.end();
}

free_status arena::deallocate(void* ptr, std::size_t bytes, bool may_release)
{
  std::lock_guard lock{mutex_};
  auto it = find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == superblocks_.end()) { return free_status::not_found; }
  auto const status = it->second.deallocate(reinterpret_cast<std::uintptr_t>(ptr), bytes);
  if (status == free_status::double_free || status == free_status::not_found) { return status; }
  if (it->second.empty()) {
    if (may_release && empty_count_ > 0) {
      try {
        release(it, true);
      } catch (...) {  // the event could not be recorded: keep the superblock, empty
        ++empty_count_;
        throw;
      }
    } else {
      ++empty_count_;
    }
  }
  return status;
}

void arena::release(superblock_map::iterator it, bool event_on_stream)
{
  lent_range const range{it->second.base(), it->second.size()};
  global_->release(range, party(), event_on_stream);  // if it throws, the superblock stays here
  held_bytes_ -= range.size;
  superblocks_.erase(it);
}

void arena::release_empty_locked()
{
  for (auto it = superblocks_.begin(); it != superblocks_.end();) {
    auto next = std::next(it);
    if (it->second.empty()) {
      release(it, false);
      --empty_count_;
    }
    it = next;
  }
}

std::size_t arena::held_bytes() const
{
  std::lock_guard lock{mutex_};
  return held_bytes_;
}

std::size_t arena::free_bytes() const
{
  std::lock_guard lock{mutex_};
  std::size_t sum{};
  for (auto const& [base, sb] : superblocks_) { sum += sb.free_bytes(); }
  return sum;
}

std::size_t arena::superblock_count() const
{
  std::lock_guard lock{mutex_};
  return superblocks_.size();
}

bool arena::is_free(std::uintptr_t addr) const
{
  std::lock_guard lock{mutex_};
  auto it = superblocks_.upper_bound(addr);
  if (it == superblocks_.begin()) { return false; }
  --it;
  return it->second.contains(addr) && it->second.is_free(addr);
}

void arena::check_invariants_locked() const
{
  std::size_t held{};
  std::size_t empties{};
  for (auto const& [base, sb] : superblocks_) {
    sb.check_invariants();
    held += sb.size();
    empties += sb.empty() ? 1 : 0;
  }
  GPUMEM_EXPECTS(held == held_bytes_, logic_error,
                 format("arena: held_bytes ", held_bytes_, " != sum of superblocks ", held));
  GPUMEM_EXPECTS(empties == empty_count_, logic_error,
                 format("arena: empty_count ", empty_count_, " != empty superblocks ", empties));
}

void arena::dump(std::ostream& out) const
{
  std::lock_guard lock{mutex_};
  out << "  " << kind_ << " arena, stream " << static_cast<void*>(stream_) << ": "
      << superblocks_.size() << " superblocks, " << bytes_str(held_bytes_) << " held, "
      << empty_count_ << " empty\n";
  for (auto const& [base, sb] : superblocks_) { sb.dump(out); }
}

}  // namespace gpumem::detail::arena
