// gpumem/mr/arena_memory_resource.hpp — a suballocator that emphasizes fragmentation avoidance
// and scalable concurrency.
//
// Memory is divided into a global arena (taken from upstream once, at construction: `arena_size`
// bytes, default half of the current device's free memory), per-thread arenas for the default
// streams (legacy and per-thread default) and per-stream arenas for other streams. Each arena takes
// superblocks (1 MiB) from the global arena, allocates from them with address-ordered first fit and
// coalesces on free; empty superblocks beyond one per arena go back to the global arena. Small
// requests (<= 1 MiB) are served by the arenas; larger ones straight by the global arena.
//
// Streams: memory freed on a stream is reused at once on that stream; before memory returned to
// the global arena reaches another stream, that stream waits for the releaser's event (or the event
// has completed). A block freed on another stream than its arena's synchronizes that stream first.
// Out of memory: the device is synchronized, empty superblocks are returned (defragment) and the
// request retried; then out_of_memory (asked, free, largest free range, fragmentation), after
// writing a memory dump to dump_log_path() when `dump_log_on_failure`.
// Bad frees (unknown pointer, double free, wrong size) are reported on stderr and counted by
// bad_deallocations(); they never change the state (a wrong size frees the block's own size).
// Thread safety: allocate/deallocate are thread-safe; the hit path takes one arena's mutex only.
// Invariants: see detail/arena/*.hpp; check_invariants() checks all of them.
#pragma once

#include <gpumem/detail/arena/arena_set.hpp>
#include <gpumem/runtime.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/resource_ref.hpp>

#include <cstddef>
#include <filesystem>
#include <iosfwd>
#include <optional>

namespace gpumem::mr {

template <typename Upstream = device_memory_resource>
class arena_memory_resource final : public device_memory_resource {
 public:
  /// Throws logic_error when `upstream_mr` is null or the arena size is below 256 bytes.
  explicit arena_memory_resource(Upstream* upstream_mr,
                                 std::optional<std::size_t> arena_size = std::nullopt,
                                 bool dump_log_on_failure              = false,
                                 gpumem::runtime& runtime              = gpumem::cuda_device())
      : arena_memory_resource{to_device_async_resource_ref_checked(upstream_mr), arena_size,
                              dump_log_on_failure, runtime}
  {
    this->link_upstream(upstream_mr);
  }

  explicit arena_memory_resource(device_async_resource_ref upstream_mr,
                                 std::optional<std::size_t> arena_size = std::nullopt,
                                 bool dump_log_on_failure              = false,
                                 gpumem::runtime& runtime              = gpumem::cuda_device())
      : upstream_{upstream_mr}, arenas_{upstream_mr, arena_size, dump_log_on_failure, runtime}
  {
  }

  ~arena_memory_resource() override                                  = default;
  arena_memory_resource(arena_memory_resource const&)                = delete;
  arena_memory_resource& operator=(arena_memory_resource const&)     = delete;
  arena_memory_resource(arena_memory_resource&&) noexcept            = delete;
  arena_memory_resource& operator=(arena_memory_resource&&) noexcept = delete;

  [[nodiscard]] bool supports_streams() const noexcept override { return true; }
  [[nodiscard]] bool supports_get_mem_info() const noexcept override { return false; }
  [[nodiscard]] device_async_resource_ref get_upstream_resource() const noexcept
  {
    return upstream_;
  }

  /// Size of the global arena in bytes.
  [[nodiscard]] std::size_t arena_size() const noexcept { return arenas_.global().size(); }
  /// Synchronizes the device and returns every empty superblock to the global arena.
  void defragment() { arenas_.defragment(); }
  /// Throws logic_error naming the first broken invariant.
  void check_invariants() const { arenas_.check_invariants(); }
  /// Writes the readable state (global arena, every arena and superblock) to `out`.
  void dump_memory_log(std::ostream& out) const { arenas_.dump_memory_log(out); }
  /// Where the dump goes on failure (appended); default "gpumem_arena_memory_dump.log".
  void set_dump_log_path(std::filesystem::path path) { arenas_.set_dump_log_path(std::move(path)); }
  [[nodiscard]] std::filesystem::path dump_log_path() const { return arenas_.dump_log_path(); }
  /// Number of rejected deallocations (unknown pointer, double free, wrong size).
  [[nodiscard]] std::size_t bad_deallocations() const noexcept
  {
    return arenas_.bad_deallocations();
  }
  /// White-box access for tests.
  [[nodiscard]] detail::arena::arena_set& arenas() noexcept { return arenas_; }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    GPUMEM_EXPECTS(can_align_up(bytes, CUDA_ALLOCATION_ALIGNMENT), out_of_memory,
                   detail::format("arena_memory_resource: cannot allocate ", bytes, " bytes"));
    return arenas_.allocate(align_up(bytes, CUDA_ALLOCATION_ALIGNMENT), stream);
  }

  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    auto const aligned = can_align_up(bytes, CUDA_ALLOCATION_ALIGNMENT)
                             ? align_up(bytes, CUDA_ALLOCATION_ALIGNMENT)
                             : bytes;
    arenas_.deallocate(ptr, aligned, stream);
  }

  device_async_resource_ref upstream_;
  detail::arena::arena_set arenas_;
};

static_assert(
    gpumem::detail::async_resource_with<arena_memory_resource<>, cuda::mr::device_accessible>);

}  // namespace gpumem::mr
