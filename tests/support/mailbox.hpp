// tests/support/mailbox.hpp — a locked FIFO through which stress-test threads hand items (blocks to
// free) to each other.
#pragma once

#include <deque>
#include <mutex>

namespace gpumem::test {

template <class T>
class mailbox {
 public:
  void put(T item)
  {
    std::lock_guard lock{mutex_};
    items_.push_back(item);
  }
  /// Moves the oldest item into `out`; false when empty.
  bool take(T& out)
  {
    std::lock_guard lock{mutex_};
    if (items_.empty()) { return false; }
    out = items_.front();
    items_.pop_front();
    return true;
  }

 private:
  std::mutex mutex_;
  std::deque<T> items_;
};

}  // namespace gpumem::test
