// gpumem/detail/arena/arena_set.hpp — the body of arena_memory_resource (not API): the global
// arena, the per-thread arenas of the default streams, the per-stream arenas of other streams,
// and the slow paths (defragment-and-retry, foreign frees, the memory dump).
//
// Lookup: a thread-local cache maps (this set, stream) to an arena without any shared lock; a
// miss takes registry_mutex_ and creates the arena (per thread for 0 / cudaStreamLegacy and for
// cudaStreamPerThread, separately; per stream otherwise). Arenas live as long as the set.
// Hit path: one arena mutex (never a global one), no runtime call.
// Lock order: registry_mutex_ -> arena -> global arena.
// Invariants (check_invariants(), all arenas locked at once):
//   every arena and superblock keeps its own; global.lent == sum of the arenas' held bytes;
//   global.free + global.lent + global.large == arena size.
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/detail/arena/arena.hpp>
#include <gpumem/detail/arena/global_arena.hpp>
#include <gpumem/detail/invariant_checks.hpp>
#include <gpumem/detail/runtime.hpp>
#include <gpumem/resource_ref.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

namespace gpumem::detail::arena {

class arena_set {
 public:
  /// Takes the global arena from `upstream`: `arena_size` bytes, or half of the runtime's free
  /// device memory. Throws logic_error for a size below 256 bytes; upstream errors propagate.
  arena_set(device_async_resource_ref upstream, std::optional<std::size_t> arena_size,
            bool dump_log_on_failure, runtime& rt);
  ~arena_set();
  arena_set(arena_set const&)            = delete;
  arena_set& operator=(arena_set const&) = delete;

  /// `bytes`: a multiple of 256. Throws out_of_memory after defragment-and-retry failed.
  [[nodiscard]] void* allocate(std::size_t bytes, cuda_stream_view stream);
  /// Bad input (unknown pointer, double free, wrong size) is reported, counted, never applied.
  void deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept;

  /// Synchronizes the device and returns every empty superblock to the global arena.
  void defragment();
  void check_invariants() const;
  void dump_memory_log(std::ostream& out) const;
  void set_dump_log_path(std::filesystem::path path);
  [[nodiscard]] std::filesystem::path dump_log_path() const;
  [[nodiscard]] std::size_t bad_deallocations() const noexcept { return bad_deallocations_; }
  [[nodiscard]] std::size_t arena_count() const;
  [[nodiscard]] global_arena const& global() const noexcept { return global_; }
  [[nodiscard]] arena& arena_for(cuda_stream_view stream);

 private:
  arena& find_or_create(cuda_stream_view stream);
  void* allocate_in(arena& a, std::size_t bytes);
  [[gnu::cold, gnu::noinline]] void* allocate_slow(std::size_t bytes, cuda_stream_view stream,
                                                   arena& a);
  [[gnu::cold, gnu::noinline]] void deallocate_slow(void* ptr, std::size_t bytes,
                                                    cuda_stream_view stream, arena& a);
  void report_bad_free(free_status status, void* ptr, std::size_t bytes,
                       cuda_stream_view stream) noexcept;
  void write_dump_file(std::size_t bytes, cuda_stream_view stream) const;
  [[noreturn]] void throw_out_of_memory(std::size_t bytes, cuda_stream_view stream) const;
  [[nodiscard]] std::vector<std::unique_lock<std::mutex>> lock_all_arenas() const;

  runtime* runtime_;
  device_async_resource_ref upstream_;
  std::uint64_t id_;
  std::size_t size_;
  void* base_;
  global_arena global_;
  bool dump_log_on_failure_;
  mutable std::mutex registry_mutex_;
  // The invariant-check build's gate (allocate and deallocate; detail/invariant_checks.hpp); an
  // empty member otherwise.
  [[no_unique_address]] call_gate gate_;
  // Keyed by a per-thread serial number that is never reused (thread ids are): a new thread
  // never inherits the arena of an exited one, whose per-thread stream may still be busy.
  std::map<std::pair<std::uint64_t, bool>, std::unique_ptr<arena>> thread_arenas_;
  std::unordered_map<cudaStream_t, std::unique_ptr<arena>> stream_arenas_;
  std::vector<arena*> arenas_;       // every arena, creation order
  std::vector<cudaEvent_t> events_;  // one release event per arena, owned here
  std::filesystem::path dump_log_path_{"gpumem_arena_memory_dump.log"};
  std::atomic<std::size_t> bad_deallocations_{};
};

}  // namespace gpumem::detail::arena
