// gpumem/caching_device_allocator.hpp — a drop-in for CUB's CachingDeviceAllocator (seed 003):
// a thread-safe, stream-safe caching allocator for device memory on several devices.
//
//  * A block freed becomes reusable at once on the stream it was allocated on, and on other
//    streams once all work submitted to that stream before the free has completed.
//  * Requests are binned geometrically (bin_growth^min_bin .. bin_growth^max_bin); smaller ones are
//    rounded up to the smallest bin, larger ones are allocated exactly and freed on DeviceFree.
//  * A freed block is cached only while the device's cached bytes stay within max_cached_bytes.
//  * Defaults: bin_growth 8, min_bin 3, max_bin 7, max_cached_bytes 6,291,455 (bins 512 B, 4 KiB,
//    32 KiB, 256 KiB, 2 MiB).
// Members keep the seed's names. Differences from the seed, on purpose: DeviceFree of a pointer
// this allocator does not know returns cudaErrorInvalidValue (and frees nothing) instead of
// handing it to cudaFree; cached_bytes / cached_blocks / live_blocks are snapshots returned by
// member functions rather than public containers; debug lines go to set_debug_stream() (stdout).
// Memory comes from the runtime (default: CUDA), which the last constructor argument can replace.
// Thread safety: every member function; one lock per device.
#pragma once

#include <gpumem/detail/caching/bin_layout.hpp>
#include <gpumem/detail/caching/block_source.hpp>
#include <gpumem/detail/caching/caching_core.hpp>
#include <gpumem/detail/runtime.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <iosfwd>
#include <map>
#include <set>

namespace gpumem {

class caching_device_allocator {
 public:
  static constexpr unsigned INVALID_BIN       = detail::caching::invalid_bin;
  static constexpr std::size_t INVALID_SIZE   = detail::caching::invalid_size;
  static constexpr int INVALID_DEVICE_ORDINAL = -1;

  struct BlockDescriptor {
    void* d_ptr{};
    std::size_t bytes{};
    unsigned bin{INVALID_BIN};
    int device{INVALID_DEVICE_ORDINAL};
    cudaStream_t associated_stream{};
    cudaEvent_t ready_event{};
  };
  struct TotalBytes {
    std::size_t free{};
    std::size_t live{};
  };
  using Compare        = bool (*)(BlockDescriptor const&, BlockDescriptor const&);
  using CachedBlocks   = std::multiset<BlockDescriptor, Compare>;  ///< ordered by size
  using BusyBlocks     = std::multiset<BlockDescriptor, Compare>;  ///< ordered by pointer
  using GpuCachedBytes = std::map<int, TotalBytes>;

  static unsigned int IntPow(unsigned int base, unsigned int exp);
  /// Rounds `value` up to the nearest power of `base`.
  void NearestPowerOf(unsigned int& power, std::size_t& rounded_bytes, unsigned int base,
                      std::size_t value);

  /// Throws logic_error when bin_growth < 2 or min_bin > max_bin.
  caching_device_allocator(unsigned int bin_growth, unsigned int min_bin = 1,
                           unsigned int max_bin         = INVALID_BIN,
                           std::size_t max_cached_bytes = INVALID_SIZE, bool skip_cleanup = false,
                           bool debug = false, detail::runtime& runtime = detail::cuda_runtime());
  /// The defaults: 8 / 3 / 7 / (8^7 * 3) - 1 = 6,291,455 bytes.
  explicit caching_device_allocator(bool skip_cleanup = false, bool debug = false,
                                    detail::runtime& runtime = detail::cuda_runtime());
  virtual ~caching_device_allocator();
  caching_device_allocator(caching_device_allocator const&)            = delete;
  caching_device_allocator& operator=(caching_device_allocator const&) = delete;

  /// New limit per device; frees nothing (see FreeAllCached()).
  cudaError_t SetMaxCachedBytes(std::size_t max_cached_bytes);
  cudaError_t DeviceAllocate(int device, void** d_ptr, std::size_t bytes,
                             cudaStream_t active_stream = nullptr);
  cudaError_t DeviceAllocate(void** d_ptr, std::size_t bytes, cudaStream_t active_stream = nullptr);
  cudaError_t DeviceFree(int device, void* d_ptr);
  cudaError_t DeviceFree(void* d_ptr);
  /// Frees all cached blocks on all devices.
  cudaError_t FreeAllCached();

  [[nodiscard]] GpuCachedBytes cached_bytes() const;
  [[nodiscard]] CachedBlocks cached_blocks() const;
  [[nodiscard]] BusyBlocks live_blocks() const;
  /// Debug lines go here (default std::cout); `out` must outlive the allocator.
  void set_debug_stream(std::ostream& out) noexcept { core_.set_debug_stream(out); }
  void check_invariants() const { core_.check_invariants(); }

  unsigned int bin_growth;       ///< geometric growth factor for bin sizes
  unsigned int min_bin;          ///< minimum bin enumeration
  unsigned int max_bin;          ///< maximum bin enumeration
  std::size_t min_bin_bytes;     ///< minimum bin size
  std::size_t max_bin_bytes;     ///< maximum bin size
  std::size_t max_cached_bytes;  ///< maximum aggregate cached bytes per device
  bool const skip_cleanup;       ///< skip FreeAllCached() in the destructor
  bool debug;                    ///< print (de)allocation events

 private:
  class runtime_source final : public detail::caching::block_source {
   public:
    explicit runtime_source(detail::runtime& rt) : rt_{rt} {}
    void* allocate(int device, std::size_t bytes, cudaStream_t stream) override;
    void free(int device, void* ptr, std::size_t bytes, cudaStream_t stream) noexcept override;

   private:
    detail::runtime& rt_;
  };

  template <class F>
  cudaError_t guarded(F&& f) noexcept;

  detail::runtime* runtime_;
  runtime_source source_;
  detail::caching::caching_core core_;
};

/// The seed's spelling.
using CachingDeviceAllocator = caching_device_allocator;

}  // namespace gpumem
