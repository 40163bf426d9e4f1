// gpumem/detail/vmm_spares.hpp — a bounded list of physical handles that the virtual-memory pool
// unmapped (trim, release threshold) but did not release, so that a later growth maps them again
// instead of creating new ones (not API; the pool's backing owns one).
//
// offer(handle, bytes)  keeps an unmapped handle while the kept bytes stay within the limit, else
//                       releases it (never throws: a handle is either kept or released).
// take(need, room)      removes and returns the spares a growth maps, largest first while they
//                       fit `need`, then the smallest larger one that fits `need + room` (handles
//                       have fixed sizes: they are composed, never split).
// put_back(taken)       returns what take() removed (a growth that failed before mapping them);
//                       never allocates (the list's capacity only grows).
// release_all()         releases every spare (pause, out of memory, destruction, on request).
//
// Invariants (check()): bytes() == sum of the spares' sizes <= limit(); no handle twice.
// Thread safety: none (the pool calls it under its grow lock).
#pragma once

#include <gpumem/detail/format.hpp>
#include <gpumem/detail/runtime.hpp>
#include <gpumem/error.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace gpumem::detail {

class vmm_spares {
 public:
  struct spare {
    vmm_handle handle{};
    std::size_t bytes{};
  };

  vmm_spares(runtime& rt, std::size_t limit) : runtime_{&rt}, limit_{limit} {}
  vmm_spares(vmm_spares const&)            = delete;
  vmm_spares& operator=(vmm_spares const&) = delete;
  ~vmm_spares() { release_all(); }

  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  [[nodiscard]] std::size_t count() const noexcept { return spares_.size(); }
  [[nodiscard]] std::size_t limit() const noexcept { return limit_; }

  /// Keeps the unmapped handle if it fits the limit (and host memory allows), else releases it.
  /// Returns whether it was kept.
  bool offer(vmm_handle handle, std::size_t bytes) noexcept
  {
    if (bytes <= limit_ - bytes_) {
      try {
        spares_.push_back({handle, bytes});
        bytes_ += bytes;
        return true;
      } catch (...) {  // NOLINT(bugprone-empty-catch): no host memory to keep it: released below
      }
    }
    runtime_->vmm_release(handle);
    return false;
  }

  /// Removes and returns spares covering up to `need` bytes (see the top of this file); the last
  /// may be larger than what is left of `need` by at most `room`. May throw bad_alloc (nothing
  /// taken then).
  [[nodiscard]] std::vector<spare> take(std::size_t need, std::size_t room)
  {
    std::vector<spare> out;
    if (spares_.empty() || need == 0) { return out; }
    out.reserve(spares_.size());
    std::sort(spares_.begin(), spares_.end(),
              [](spare const& a, spare const& b) { return a.bytes > b.bytes; });
    auto left = need;
    for (auto& s : spares_) {  // largest first while they fit
      if (s.bytes <= left) {
        out.push_back(s);
        left -= s.bytes;
        s.bytes = 0;  // taken
      }
    }
    if (left > 0) {  // the smallest larger one that the range has room for
      spare* larger = nullptr;
      for (auto& s : spares_) {
        if (s.bytes > left && s.bytes - left <= room) { larger = &s; }
      }
      if (larger != nullptr) {
        out.push_back(*larger);
        larger->bytes = 0;
      }
    }
    std::erase_if(spares_, [](spare const& s) { return s.bytes == 0; });
    for (auto const& s : out) { bytes_ -= s.bytes; }
    return out;
  }

  /// Returns spares that take() removed (never allocates: they fitted in the list before).
  void put_back(std::vector<spare> const& taken) noexcept
  {
    for (auto const& s : taken) {
      spares_.push_back(s);  // within capacity
      bytes_ += s.bytes;
    }
  }

  /// Releases every spare; returns the bytes released.
  std::size_t release_all() noexcept
  {
    auto const released = bytes_;
    for (auto const& s : spares_) { runtime_->vmm_release(s.handle); }
    spares_.clear();
    bytes_ = 0;
    return released;
  }

  /// Whether `handle` is a spare (for the backing's invariants).
  [[nodiscard]] bool holds(vmm_handle handle) const noexcept
  {
    return std::any_of(spares_.begin(), spares_.end(),
                       [&](spare const& s) { return s.handle == handle; });
  }

  void check() const
  {
    std::size_t sum{};
    for (std::size_t i = 0; i < spares_.size(); ++i) {
      sum += spares_[i].bytes;
      for (std::size_t j = i + 1; j < spares_.size(); ++j) {
        GPUMEM_EXPECTS(
            spares_[i].handle != spares_[j].handle, logic_error,
            "vmm_pool_memory_resource: invariant broken: a spare handle is listed twice");
      }
    }
    GPUMEM_EXPECTS(sum == bytes_ && bytes_ <= limit_, logic_error,
                   format("vmm_pool_memory_resource: invariant broken: spare bytes ", bytes_,
                          " != sum ", sum, " or above the limit ", limit_));
  }

 private:
  runtime* runtime_;
  std::size_t limit_;
  std::vector<spare> spares_;
  std::size_t bytes_{};  // == sum of spares_ sizes <= limit_
};

}  // namespace gpumem::detail
