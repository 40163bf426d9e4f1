// gpumem/detail/in_place_growth.hpp — the stream-ordered core's growth by backing more of one
// reserved address range in place (the virtual-memory pool; not API).
//
// The resource registers its range once (register_range): blocks name it as their chunk, so they
// coalesce across growth steps. A growth asks the resource to back more of the range and take the
// request from the idle list (Source::grow_in_place(idle, size, may_move)); free memory may be
// unmapped and moved only when every idle block is idle for the device. While the placement says
// queued work may still use idle blocks (idle_in_use()), the growth takes new memory only; when
// that is not enough (out_of_memory) it settles the idle list (a synchronization) and may move
// memory. The pool size follows what the resource has backed (Source::backed_bytes()) after every
// growth or change made through track(), whether it returns or throws. The resource gives memory
// back by itself (lean == true); release() only forgets the range.
//
// Invariants (check_invariants() throws logic_error naming the broken one):
//   at most one range, numbered 0
//   bytes_ == Source::backed_bytes()
//   the resource's own (Source::check_backing(blocks))
// Thread safety: everything but bytes() under the core's grow lock.
#pragma once

#include <gpumem/detail/free_block.hpp>
#include <gpumem/detail/invariant.hpp>

#include <atomic>
#include <mutex>
#include <vector>

namespace gpumem::detail {

class in_place_growth {
 public:
  /// Maps only what it needs: blocks held in a cache above make it grow.
  static constexpr bool lean = true;

  /// The pool size: bytes backed (free and handed out), as of the last growth or track(). Any
  /// thread.
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_.load(); }
  /// The range (once registered), numbered 0 (what the blocks name).
  [[nodiscard]] std::vector<free_block> const& chunks() const noexcept { return range_; }

  /// Registers the reserved range; nothing becomes free. May throw bad_alloc.
  void register_range(free_block range)
  {
    range.chunk = static_cast<std::uint32_t>(range_.size());
    range_.push_back(range);
  }

  /// Backs more of the range and takes a block of `size` from `idle` (the core's idle list: a mutex
  /// and a list, locked here). Throws out_of_memory, or what settling the idle list throws.
  template <class Source, class Idle, class Placement>
  [[gnu::cold, gnu::noinline]] free_block grow(Source& source, Idle& idle, std::size_t size,
                                               Placement& placement)
  {
    std::lock_guard lock{idle.mutex};
    return track(source, [&] {
      if (placement.idle_in_use()) {  // waiting would stall the queued work: new memory only
        try {
          return source.grow_in_place(idle.list, size, false);
        } catch (out_of_memory const&) {  // NOLINT(bugprone-empty-catch): wait, then move memory
        }
      }
      placement.settle_idle();  // the growth may unmap free memory: the device must be done with it
      return source.grow_in_place(idle.list, size, true);
    });
  }

  /// f(), after which the pool size follows the backing whether f returns or throws.
  template <class Source, class F>
  decltype(auto) track(Source& source, F&& f)
  {
    struct update_size {
      in_place_growth* self;
      Source& source;
      ~update_size() { self->bytes_ = source.backed_bytes(); }
    } const update{this, source};
    return f();
  }

  /// Forgets the range (the resource releases its backing itself).
  template <class Source>
  void release(Source& /*source*/) noexcept
  {
    range_.clear();
    bytes_ = 0;
  }

  template <class Source>
  void check_invariants(char const* resource, Source const& source,
                        std::vector<free_block> const& blocks) const
  {
    GPUMEM_INVARIANT(range_.size() <= 1 && (range_.empty() || range_[0].chunk == 0), resource,
                     format(range_.size(), " ranges registered"));
    source.check_backing(blocks);
    GPUMEM_INVARIANT(
        bytes_ == source.backed_bytes(), resource,
        format("pool size ", bytes_.load(), " != backed bytes ", source.backed_bytes()));
  }

 private:
  std::vector<free_block> range_;     // the reserved range, once registered
  std::atomic<std::size_t> bytes_{};  // == Source::backed_bytes() outside a growth
};

}  // namespace gpumem::detail
