// gpumem/detail/caching/caching_core.hpp — the CUB-style caching allocator (not API); shared by
// the drop-in caching_device_allocator and mr::caching_memory_resource.
//
// Per device: cached (free) blocks by bin, live blocks by pointer, and the totals.
//  * allocate: a request is classified (bin_layout). A binned request first reuses a cached block
//    of its bin: one last used on the same stream (no runtime call), else one whose ready event
//    has completed (event_query: all work submitted to its stream before the free is done). A miss
//    takes a new block from the source; on out_of_memory the device's cache is released and the
//    request retried once. Pass-through requests (above the largest bin) always go to the source.
//  * deallocate: a binned block is cached, with its ready event recorded on its stream, when the
//    device's cached bytes stay within max_cached_bytes; otherwise (and pass-through blocks) it is
//    freed to the source. The stream of a block is the one it was allocated on, or the stream given
//    to deallocate (the memory-resource contract).
//  * per-thread default stream: two uses of cudaStreamPerThread are "the same stream" only on the
//    same host thread.
// Thread safety: all members; one mutex per device (not global). Runtime calls (event record /
// query, device switch) happen under that device's mutex, as in CUB's allocator.
// Invariants per device (check_invariants()):
//   totals.free == sum of cached block sizes;  totals.live == sum of live block sizes
//   every cached block has a bin in [min_bin, last_bin], bin_bytes(bin) bytes and a ready event
#pragma once

#include <gpumem/detail/caching/bin_layout.hpp>
#include <gpumem/detail/caching/block_source.hpp>
#include <gpumem/detail/runtime.hpp>

#include <atomic>
#include <cstddef>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

namespace gpumem::detail::caching {

/// Bytes cached (free) and in use (live) on one device.
struct cached_totals {
  std::size_t free{};
  std::size_t live{};
};

/// Blocks freed at once: how many, and their bytes.
struct released_blocks {
  std::size_t count{};
  std::size_t bytes{};
};

/// One block as seen from outside (snapshots for the drop-in class and tests).
struct block_info {
  void* ptr{};
  std::size_t bytes{};
  unsigned bin{invalid_bin};
  int device{};
  cudaStream_t stream{};
  cudaEvent_t ready_event{};
  bool live{};
};

enum class free_status { cached, released, unknown_pointer };

class caching_core {
 public:
  /// `switch_devices`: make a block's device current around its runtime and source calls
  /// (drop-in class); otherwise the caller keeps the device current (memory resource).
  caching_core(bin_layout layout, std::size_t max_cached_bytes, block_source& source, runtime& rt,
               bool switch_devices);
  ~caching_core();  // destroys the events of live blocks; the owner releases the cache first
  caching_core(caching_core const&)            = delete;
  caching_core& operator=(caching_core const&) = delete;

  /// Throws out_of_memory / the source's errors; logic_error for an invalid device.
  [[nodiscard]] void* allocate(int device, std::size_t bytes, cudaStream_t stream);
  /// `reuse_stream`: the stream the block is freed on (default: the one it was allocated on).
  /// `bytes_out` receives the block's size. Throws only on runtime failure of a device switch.
  free_status deallocate(int device, void* ptr, std::optional<cudaStream_t> reuse_stream,
                         std::size_t* bytes_out = nullptr);
  /// Frees every cached block of every device to the source.
  void free_all_cached();
  /// Frees every live block of every device to the source (an owner going away with blocks still
  /// handed out); returns their count and bytes. Never throws.
  released_blocks release_live() noexcept;
  /// Frees nothing; a debug line says old and new limit.
  void set_max_cached_bytes(std::size_t bytes);
  [[nodiscard]] std::size_t max_cached_bytes() const noexcept { return max_cached_bytes_; }
  void set_debug(bool on) noexcept { debug_ = on; }
  [[nodiscard]] bool debug() const noexcept { return debug_; }
  /// Where debug lines go (default std::cout); the stream must outlive the allocator.
  void set_debug_stream(std::ostream& out) noexcept { debug_out_ = &out; }

  [[nodiscard]] bin_layout const& layout() const noexcept { return layout_; }
  [[nodiscard]] int device_count() const noexcept { return static_cast<int>(devices_.size()); }
  [[nodiscard]] cached_totals totals(int device) const;
  [[nodiscard]] std::vector<block_info> blocks() const;
  void check_invariants() const;

 private:
  struct block {
    void* ptr{};
    std::size_t bytes{};
    unsigned bin{invalid_bin};
    cudaStream_t stream{};
    std::thread::id thread{};  // set for the per-thread default stream only
    cudaEvent_t event{};
  };
  struct device_state {
    mutable std::mutex mutex;
    std::vector<std::vector<block>> bins;  // cached blocks per bin (index bin - min_bin), LIFO
    std::unordered_map<void*, block> live;
    cached_totals totals;
  };

  device_state& state(int device) const;
  std::optional<block> take_cached(device_state& d, unsigned bin, cudaStream_t stream);
  void* allocate_new(int device, device_state& d, bin_choice choice, cudaStream_t stream);
  void* allocate_from_source(int device, std::size_t bytes, cudaStream_t stream);
  bool try_cache(device_state& d, block& b);
  void release(int device, block const& b) noexcept;
  void release_cached(int device);
  void debug_line(int device, char const* what, block const& b,
                  device_state const& d) const noexcept;

  bin_layout layout_;
  std::atomic<std::size_t> max_cached_bytes_;
  block_source* source_;
  runtime* runtime_;
  bool switch_devices_;
  std::atomic<bool> debug_{false};
  std::ostream* debug_out_;
  std::vector<std::unique_ptr<device_state>> devices_;
};

}  // namespace gpumem::detail::caching
