// Superblock bookkeeping: address-ordered first fit with coalescing. See superblock.hpp.
#include <gpumem/detail/arena/superblock.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>

#include <algorithm>
#include <ostream>

namespace gpumem::detail::arena {

superblock::superblock(std::uintptr_t base, std::size_t size) : base_{base}, size_{size}
{
  free_.emplace(base, size);
  free_bytes_ = size;
}

std::size_t superblock::largest_free() const noexcept
{
  std::size_t best{};
  for (auto const& [addr, bytes] : free_) { best = std::max(best, bytes); }
  return best;
}

std::uintptr_t superblock::allocate(std::size_t bytes)
{
  if (bytes > free_bytes_) { return 0; }
  auto it =
      std::find_if(free_.begin(), free_.end(), [&](auto const& b) { return b.second >= bytes; });
  if (it == free_.end()) { return 0; }
  auto const [addr, size] = *it;
  live_.emplace(addr, bytes);  // may throw before any change below
  free_.erase(it);
  if (size > bytes) { free_.emplace(addr + bytes, size - bytes); }
  free_bytes_ -= bytes;
  live_bytes_ += bytes;
  return addr;
}

free_status superblock::deallocate(std::uintptr_t addr, std::size_t bytes)
{
  auto it = live_.find(addr);
  if (it == live_.end()) {
    return is_free(addr) ? free_status::double_free : free_status::not_found;
  }
  auto const size = it->second;
  live_.erase(it);
  live_bytes_ -= size;
  insert_free(addr, size);
  return size == bytes ? free_status::freed : free_status::wrong_size;
}

void superblock::insert_free(std::uintptr_t addr, std::size_t bytes)
{
  free_bytes_ += bytes;
  insert_coalescing(free_, addr, bytes);
}

bool superblock::is_free(std::uintptr_t addr) const
{
  auto it = free_.upper_bound(addr);
  if (it == free_.begin()) { return false; }
  --it;
  return addr - it->first < it->second;
}

void superblock::check_invariants() const
{
  auto fail = [&](char const* what) {
    GPUMEM_FAIL(logic_error, format("superblock ", ptr_str(reinterpret_cast<void*>(base_)), " (",
                                    size_, " B): ", what));
  };
  if (free_bytes_ + live_bytes_ != size_) { fail("free_bytes + live_bytes != size"); }
  std::size_t sum{};
  std::uintptr_t prev_end{};
  for (auto const& [addr, bytes] : free_) {
    if (bytes == 0 || !contains(addr) || bytes > base_ + size_ - addr) {
      fail("free block outside");
    }
    if (prev_end != 0 && addr <= prev_end) { fail("free blocks overlap or are not coalesced"); }
    prev_end = addr + bytes;
    sum += bytes;
  }
  if (sum != free_bytes_) { fail("free_bytes != sum of free blocks"); }
  sum = 0;
  for (auto const& [addr, bytes] : live_) {
    if (bytes == 0 || !contains(addr) || bytes > base_ + size_ - addr) {
      fail("live block outside");
    }
    if (is_free(addr) || is_free(addr + bytes - 1)) { fail("live block overlaps a free block"); }
    sum += bytes;
  }
  if (sum != live_bytes_) { fail("live_bytes != sum of live blocks"); }
}

void superblock::dump(std::ostream& out) const
{
  out << "    superblock " << ptr_str(reinterpret_cast<void*>(base_)) << " size "
      << bytes_str(size_) << ", live " << live_.size() << " blocks / " << bytes_str(live_bytes_)
      << ", free " << free_.size() << " blocks / " << bytes_str(free_bytes_) << ", largest free "
      << bytes_str(largest_free()) << '\n';
  for (auto const& [addr, bytes] : free_) {
    out << "      free " << ptr_str(reinterpret_cast<void*>(addr)) << " " << bytes << " B\n";
  }
}

}  // namespace gpumem::detail::arena
