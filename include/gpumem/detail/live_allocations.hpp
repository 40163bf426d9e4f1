// gpumem/detail/live_allocations.hpp — the blocks an adaptor handed out and that are not freed
// yet, pointer -> what it needs to know about each (not API): the size (live_allocations), or a
// record whose `bytes` member is the size (live_blocks<Info>; aligned_resource_adaptor keeps the
// upstream's pointer there too). With it, an adaptor that keeps counters or records (limiting,
// statistics, aligned) knows whether a deallocate is good before it touches them, so that a
// double free, a wrong size or a foreign pointer never makes a counter wrap or go negative; the
// tracking adaptor, whose ordered map of records is its API, reports the same way
// (report_wrong_size_free):
//   - a live pointer freed with another size: reported on stderr and counted in
//     bad_deallocations(), like the suballocators do; the size it was allocated with is what goes
//     back upstream and off the counters;
//   - a pointer not live here (a double free, another resource's memory, or memory allocated
//     before the adaptor existed): counted in untracked_deallocations(); the adaptor passes it to
//     its upstream unchanged (the upstream decides; a suballocator reports and ignores a bad one)
//     and leaves its counters alone.
//
// Invariant: each live pointer is in exactly one shard (chosen by its address), with its record.
// Thread safety: all members are thread-safe (one mutex per shard).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <type_traits>
#include <unordered_map>

namespace gpumem::detail {

/// Reports on stderr (the first few per adaptor; `count` is the adaptor's running count)
/// deallocate(ptr, bytes) of a block allocated with `allocated` bytes. Never throws.
void report_wrong_size_free(char const* adaptor, void const* ptr, std::size_t bytes,
                            std::size_t allocated, std::uint64_t count) noexcept;

/// Info: std::size_t (the size), or a record whose `bytes` member is the size.
template <class Info>
class live_blocks {
  static_assert(std::is_nothrow_move_constructible_v<Info>, "take() must not throw");

 public:
  /// Records `ptr` (not live) with `info`; may throw std::bad_alloc (nothing recorded then).
  void insert(void const* ptr, Info info)
  {
    auto& s = shard_of(ptr);
    std::lock_guard lock{s.mutex};
    s.blocks.emplace(ptr, std::move(info));
  }

  /// For deallocate(ptr, bytes) through `adaptor`: forgets ptr and returns what was recorded
  /// with it, or nullopt when ptr is not live here (see above). Never throws.
  std::optional<Info> take(void const* ptr, std::size_t bytes, char const* adaptor) noexcept
  {
    std::optional<Info> recorded;
    {
      auto& s = shard_of(ptr);
      std::lock_guard lock{s.mutex};
      auto it = s.blocks.find(ptr);
      if (it == s.blocks.end()) {
        untracked_.fetch_add(1, std::memory_order_relaxed);
        return std::nullopt;
      }
      recorded.emplace(std::move(it->second));
      s.blocks.erase(it);
    }
    if (std::size_t const allocated = bytes_of(*recorded); allocated != bytes) {
      report_wrong_size_free(adaptor, ptr, bytes, allocated, bad_.fetch_add(1) + 1);
    }
    return recorded;
  }

  /// Deallocates of a live pointer with a wrong size.
  [[nodiscard]] std::uint64_t bad_deallocations() const noexcept { return bad_.load(); }
  /// Deallocates of pointers that were not live here.
  [[nodiscard]] std::uint64_t untracked_deallocations() const noexcept { return untracked_.load(); }

 private:
  static constexpr std::size_t shard_count = 16;
  struct alignas(64) shard {
    std::mutex mutex;
    std::unordered_map<void const*, Info> blocks;
  };

  static std::size_t bytes_of(Info const& info) noexcept
  {
    if constexpr (std::is_integral_v<Info>) {
      return info;
    } else {
      return info.bytes;
    }
  }

  shard& shard_of(void const* ptr) noexcept
  {
    auto const a = reinterpret_cast<std::uintptr_t>(ptr);
    return shards_[((a >> 8) ^ (a >> 16)) % shard_count];
  }

  std::array<shard, shard_count> shards_;
  std::atomic<std::uint64_t> bad_{0};
  std::atomic<std::uint64_t> untracked_{0};
};

/// The live allocations of an adaptor that needs only their sizes.
using live_allocations = live_blocks<std::size_t>;

}  // namespace gpumem::detail
