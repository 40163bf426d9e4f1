#include <conformance/conformance.hpp>

#include <cstring>

namespace gpumem::test {

void live_set::add(void* p, std::size_t bytes, unsigned char tag)
{
  auto* c = static_cast<char*>(p);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(is_pointer_aligned(p)) << p << " is not 256-byte aligned";
  auto next = live_.lower_bound(c);
  if (next != live_.end()) { ASSERT_LE(c + bytes, next->first) << "overlaps a live allocation"; }
  if (next != live_.begin()) {
    auto prev = std::prev(next);
    ASSERT_LE(prev->first + prev->second.first, c) << "overlaps a live allocation";
  }
  live_.emplace(c, std::pair{bytes, tag});
  if (host_accessible_) { std::memset(p, tag, bytes); }
}

std::size_t live_set::remove(void* p)
{
  auto it = live_.find(static_cast<char*>(p));
  if (it == live_.end()) {
    ADD_FAILURE() << "removing unknown pointer";
    return 0;
  }
  auto const [bytes, tag] = it->second;
  if (host_accessible_) {
    for (std::size_t i = 0; i < bytes; i += 61) {
      if (static_cast<unsigned char>(it->first[i]) != tag) {
        ADD_FAILURE() << "allocation " << p << " was overwritten at offset " << i;
        break;
      }
    }
  }
  live_.erase(it);
  return bytes;
}

}  // namespace gpumem::test
