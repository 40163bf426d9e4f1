// gpumem/detail/vmm_home_layout.hpp — where the virtual-memory pool's physical handles were mapped
// when the pool was last wholly free, and the moves that put them back there (not API; the pool's
// backing owns one).
//
// A job that runs again and again over one pool (each run builds its buffers, works, and frees them
// all) starts each run from the layout the last one left. A growth that moved free handles
// (vmm_backing::extend) leaves the layout different after the run, best fit then places the next
// run differently, and the layout drifts: its peak creeps up from run to run (a recorded
// variable-length training trace replayed 80 times over one pool went from 1.010 to 1.072 times
// its live bytes). Putting the handles back where they were the last time the pool was wholly free
// makes every run start from the same layout, and a run that does what the last one did then
// places what the last one placed.
//
// remember(now)  the present mappings (address order) become home.
// plan(now)      the moves that put the same handles back home: every mapping that is not at a
//                home slot goes to an empty home slot of its size (both taken in address order,
//                size by size); no moves when everything is at home; nothing (nullopt) when the
//                handles are not home's (a growth created memory or a trim released some since),
//                and the caller remembers the present layout instead.
//
// Invariants (check()): the slots are in address order, disjoint, and not empty.
// Thread safety: none (the backing's owner calls it under its grow lock).
#pragma once

#include <gpumem/detail/format.hpp>
#include <gpumem/detail/invariant.hpp>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <vector>

namespace gpumem::detail {

class vmm_home_layout {
 public:
  struct slot {  // one mapping: a handle of `bytes` mapped at `at`
    char* at{};
    std::size_t bytes{};
    friend bool operator==(slot const&, slot const&) = default;
  };
  struct move {  // the handle mapped at `from` goes to `to`
    char* from{};
    char* to{};
    std::size_t bytes{};
  };

  [[nodiscard]] bool empty() const noexcept { return slots_.empty(); }
  [[nodiscard]] std::vector<slot> const& slots() const noexcept { return slots_; }
  void remember(std::vector<slot> now) noexcept { slots_ = std::move(now); }

  /// See the top of this file. `now`: the present mappings in address order. May throw bad_alloc.
  [[nodiscard]] std::optional<std::vector<move>> plan(std::vector<slot> const& now) const
  {
    std::vector<slot> away;   // mapped now, not at a home slot
    std::vector<slot> empty;  // home slots with no mapping now
    std::size_t i = 0;
    std::size_t j = 0;
    while (i < now.size() || j < slots_.size()) {
      if (j == slots_.size() || (i < now.size() && now[i].at < slots_[j].at)) {
        away.push_back(now[i++]);
      } else if (i == now.size() || slots_[j].at < now[i].at) {
        empty.push_back(slots_[j++]);
      } else if (now[i].bytes == slots_[j].bytes) {
        ++i, ++j;  // at home
      } else {
        away.push_back(now[i++]);
        empty.push_back(slots_[j++]);
      }
    }
    if (away.size() != empty.size()) { return std::nullopt; }
    auto const by_size = [](slot const& a, slot const& b) {
      return a.bytes != b.bytes ? a.bytes < b.bytes : a.at < b.at;
    };
    std::sort(away.begin(), away.end(), by_size);
    std::sort(empty.begin(), empty.end(), by_size);
    std::vector<move> moves;
    moves.reserve(away.size());
    for (std::size_t k = 0; k < away.size(); ++k) {
      if (away[k].bytes != empty[k].bytes) { return std::nullopt; }  // other handles than home's
      moves.push_back({away[k].at, empty[k].at, away[k].bytes});
    }
    return moves;
  }

  void check(char const* resource) const
  {
    for (std::size_t k = 0; k < slots_.size(); ++k) {
      GPUMEM_INVARIANT(slots_[k].bytes > 0, resource, format("home slot ", k, " is empty"));
      GPUMEM_INVARIANT(k == 0 || slots_[k - 1].at + slots_[k - 1].bytes <= slots_[k].at, resource,
                       format("home slots ", k - 1, " and ", k, " overlap or are out of order"));
    }
  }

 private:
  std::vector<slot> slots_;  // address order
};

}  // namespace gpumem::detail
