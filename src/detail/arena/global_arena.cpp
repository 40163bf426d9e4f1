// The global arena: first fit over address-ordered free ranges, pending release events.
#include <gpumem/detail/arena/global_arena.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>

#include <algorithm>
#include <ostream>

namespace gpumem::detail::arena {

global_arena::global_arena(void* base, std::size_t size, runtime& rt)
    : runtime_{&rt}, base_{reinterpret_cast<std::uintptr_t>(base)}, size_{size}
{
  free_.emplace(base_, size_);
  free_bytes_ = size_;
}

std::uintptr_t global_arena::take_first_fit(std::size_t need, std::size_t want, std::size_t& got)
{
  auto it =
      std::find_if(free_.begin(), free_.end(), [&](auto const& r) { return r.second >= want; });
  if (it == free_.end()) {
    it = std::find_if(free_.begin(), free_.end(), [&](auto const& r) { return r.second >= need; });
  }
  if (it == free_.end()) { return 0; }
  auto const [addr, size] = *it;
  got                     = std::min(size, want);
  free_.erase(it);
  if (size > got) { free_.emplace(addr + got, size - got); }
  free_bytes_ -= got;
  return addr;
}

void global_arena::give_back(std::uintptr_t addr, std::size_t bytes)
{
  free_bytes_ += bytes;
  insert_coalescing(free_, addr, bytes);
}

void global_arena::order_after_releases(stream_party const& taker)
{
  std::erase_if(pending_, [&](stream_party const& p) {
    if (p.id == taker.id) { return false; }
    if (runtime_->event_query(p.release_event)) { return true; }
    runtime_->stream_wait_event(taker.stream, p.release_event);
    return false;
  });
}

void global_arena::note_release(stream_party const& releaser)
{
  try {
    runtime_->event_record(releaser.release_event, releaser.stream);
  } catch (cuda_error const&) {
    // No event to order a later taker after this release: the releasing stream finishes its work
    // here instead, and the range is free for anyone. (When that fails too, it throws and the
    // range stays out of use: nothing can tell when the device is done with it.)
    runtime_->stream_synchronize(releaser.stream);
    return;
  }
  auto const known = std::any_of(pending_.begin(), pending_.end(),
                                 [&](stream_party const& p) { return p.id == releaser.id; });
  if (!known) { pending_.push_back(releaser); }
}

lent_range global_arena::acquire(std::size_t need, std::size_t want, stream_party const& taker)
{
  std::lock_guard lock{mutex_};
  order_after_releases(taker);  // first: if it throws, nothing has changed
  std::size_t got{};
  auto const addr = take_first_fit(need, std::max(need, want), got);
  if (addr == 0) { return {}; }
  lent_bytes_ += got;
  return {addr, got};
}

void global_arena::release(lent_range range, stream_party const& releaser, bool event_on_stream)
{
  std::lock_guard lock{mutex_};
  if (event_on_stream) { note_release(releaser); }
  lent_bytes_ -= range.size;
  give_back(range.base, range.size);
}

void* global_arena::allocate_large(std::size_t bytes, stream_party const& taker)
{
  std::lock_guard lock{mutex_};
  std::size_t got{};
  large_.reserve(large_.size() + 1);  // what may throw comes before any change
  order_after_releases(taker);
  auto const addr = take_first_fit(bytes, bytes, got);
  if (addr == 0) { return nullptr; }
  large_.emplace(addr, got);
  large_bytes_ += got;
  return reinterpret_cast<void*>(addr);
}

free_status global_arena::deallocate_large(void* ptr, std::size_t bytes,
                                           stream_party const& releaser)
{
  std::lock_guard lock{mutex_};
  auto const addr = reinterpret_cast<std::uintptr_t>(ptr);
  auto it         = large_.find(addr);
  if (it == large_.end()) {
    auto f             = free_.upper_bound(addr);
    bool const in_free = f != free_.begin() && addr - std::prev(f)->first < std::prev(f)->second;
    return in_free ? free_status::double_free : free_status::not_found;
  }
  auto const size = it->second;
  note_release(releaser);
  large_.erase(it);
  large_bytes_ -= size;
  give_back(addr, size);
  return size == bytes ? free_status::freed : free_status::wrong_size;
}

bool global_arena::owns_large(void* ptr) const
{
  std::lock_guard lock{mutex_};
  return large_.contains(reinterpret_cast<std::uintptr_t>(ptr));
}

std::size_t global_arena::free_bytes() const
{
  std::lock_guard lock{mutex_};
  return free_bytes_;
}

std::size_t global_arena::largest_free_locked() const
{
  std::size_t best{};
  for (auto const& [addr, bytes] : free_) { best = std::max(best, bytes); }
  return best;
}

std::size_t global_arena::largest_free() const
{
  std::lock_guard lock{mutex_};
  return largest_free_locked();
}

std::size_t global_arena::lent_bytes() const
{
  std::lock_guard lock{mutex_};
  return lent_bytes_;
}

bool global_arena::is_free(std::uintptr_t addr) const
{
  std::lock_guard lock{mutex_};
  auto f = free_.upper_bound(addr);
  return f != free_.begin() && addr - std::prev(f)->first < std::prev(f)->second;
}

void global_arena::check_invariants(std::size_t arena_held_bytes) const
{
  std::lock_guard lock{mutex_};
  auto fail = [](std::string const& what) { GPUMEM_FAIL(logic_error, "global arena: " + what); };
  if (free_bytes_ + lent_bytes_ + large_bytes_ != size_) {
    fail(format("free ", free_bytes_, " + lent ", lent_bytes_, " + large ", large_bytes_,
                " != size ", size_));
  }
  if (arena_held_bytes != lent_bytes_) {
    fail(format("arenas hold ", arena_held_bytes, " B but ", lent_bytes_, " B are lent"));
  }
  std::size_t sum{};
  std::uintptr_t prev_end{};
  for (auto const& [addr, bytes] : free_) {
    if (bytes == 0 || addr < base_ || addr + bytes > base_ + size_) { fail("free range outside"); }
    if (prev_end != 0 && addr <= prev_end) { fail("free ranges overlap or are not coalesced"); }
    prev_end = addr + bytes;
    sum += bytes;
  }
  if (sum != free_bytes_) { fail("free_bytes != sum of free ranges"); }
  sum = 0;
  for (auto const& [addr, bytes] : large_) { sum += bytes; }
  if (sum != large_bytes_) { fail("large_bytes != sum of large allocations"); }
}

void global_arena::dump(std::ostream& out) const
{
  std::lock_guard lock{mutex_};
  out << "global arena " << ptr_str(reinterpret_cast<void*>(base_)) << " size " << bytes_str(size_)
      << "\n  free " << bytes_str(free_bytes_) << " in " << free_.size() << " ranges, largest "
      << bytes_str(largest_free_locked()) << "\n  lent to arenas " << bytes_str(lent_bytes_)
      << "\n  large allocations " << large_.size() << " / " << bytes_str(large_bytes_)
      << "\n  pending release events " << pending_.size() << '\n';
  for (auto const& [addr, bytes] : free_) {
    out << "  free range " << ptr_str(reinterpret_cast<void*>(addr)) << " " << bytes << " B\n";
  }
}

}  // namespace gpumem::detail::arena
