// gpumem/caching_device_allocator.hpp — a drop-in for CUB's CachingDeviceAllocator:
// a thread-safe, stream-safe caching allocator for device memory on several devices.
//
//  * A block freed becomes reusable at once on the stream it was allocated on, and on other
//    streams once all work submitted to that stream before the free has completed.
//  * Requests are binned geometrically (bin_growth^min_bin .. bin_growth^max_bin); smaller ones are
//    rounded up to the smallest bin, larger ones are allocated exactly and freed on DeviceFree.
//  * A freed block is cached only while the device's cached bytes stay within max_cached_bytes.
//  * Defaults: bin_growth 8, min_bin 3, max_bin 7, max_cached_bytes 6,291,455 (bins 512 B, 4 KiB,
//    32 KiB, 256 KiB, 2 MiB).
// Members keep CUB's names. Differences from CUB, on purpose: DeviceFree of a pointer
// this allocator does not know returns cudaErrorInvalidValue (and frees nothing) instead of
// handing it to cudaFree; debug lines go to set_debug_stream() (stdout).
//
// CUB's public fields, for code written against CUB (every write either takes effect or does
// not compile; none is silently ignored):
//  * bin_growth, min_bin, max_bin, min_bin_bytes, max_bin_bytes: read like CUB's integers; the
//    bins are fixed at construction, so a write does not compile (static_assert says why).
//  * skip_cleanup: `const bool`, as in CUB; read by the destructor.
//  * max_cached_bytes: reads the current limit; `a.max_cached_bytes = n` (and += / -=) is
//    SetMaxCachedBytes(n): it takes effect for the next DeviceFree and frees nothing.
//  * debug: reads and writes the debug switch; a write takes effect for the next call (any thread).
//  * cached_bytes, cached_blocks, live_blocks: read-only views. `a.cached_bytes[d].free`,
//    `.live`, `a.cached_bytes.count(d)`, `a.cached_blocks.size()`, `a.live_blocks.empty()` read as
//    in CUB; `a.cached_blocks()` returns a copy (a snapshot) to iterate. Nothing writes them:
//    the allocator's bookkeeping cannot be edited from outside (a write does not compile).
// Memory comes from the runtime (default: CUDA), which the last constructor argument can replace.
// Thread safety: every member function; one lock per device.
#pragma once

#include <gpumem/detail/caching/bin_layout.hpp>
#include <gpumem/detail/caching/block_source.hpp>
#include <gpumem/detail/caching/caching_core.hpp>
#include <gpumem/runtime.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <concepts>
#include <iosfwd>
#include <map>
#include <set>
#include <type_traits>

namespace gpumem {

namespace detail::caching {

template <class>
inline constexpr bool always_false = false;

}  // namespace detail::caching

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
                           bool debug = false, gpumem::runtime& runtime = gpumem::cuda_device());
  /// The defaults: 8 / 3 / 7 / (8^7 * 3) - 1 = 6,291,455 bytes.
  explicit caching_device_allocator(bool skip_cleanup = false, bool debug = false,
                                    gpumem::runtime& runtime = gpumem::cuda_device());
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

  /// Debug lines go here (default std::cout); `out` must outlive the allocator.
  void set_debug_stream(std::ostream& out) noexcept { core_.set_debug_stream(out); }
  void check_invariants() const { core_.check_invariants(); }

  /// bin_growth / min_bin / max_bin / min_bin_bytes / max_bin_bytes: fixed at construction; a
  /// field reads as a T, and any write fails to compile with the message below.
  template <class T>
  class fixed_field {
   public:
    constexpr explicit fixed_field(T value) noexcept : value_{value} {}
    constexpr fixed_field(fixed_field const&) noexcept = default;
    constexpr operator T() const noexcept { return value_; }  // NOLINT(google-explicit-constructor)

#define GPUMEM_FIXED_FIELD_REJECT(op)                                                          \
  template <class U>                                                                           \
  fixed_field& operator op(U&&)                                                                \
  {                                                                                            \
    static_assert(detail::caching::always_false<U>,                                            \
                  "caching_device_allocator: bin_growth, min_bin, max_bin, min_bin_bytes and " \
                  "max_bin_bytes are fixed at construction (the bins are laid out then); "     \
                  "construct another allocator to change them");                               \
    return *this;                                                                              \
  }
    GPUMEM_FIXED_FIELD_REJECT(=)
    GPUMEM_FIXED_FIELD_REJECT(+=)
    GPUMEM_FIXED_FIELD_REJECT(-=)
    GPUMEM_FIXED_FIELD_REJECT(*=)
    GPUMEM_FIXED_FIELD_REJECT(/=)
#undef GPUMEM_FIXED_FIELD_REJECT
    fixed_field& operator=(fixed_field const&) = delete;
    fixed_field& operator++()                  = delete;
    fixed_field& operator--()                  = delete;
    fixed_field operator++(int)                = delete;
    fixed_field operator--(int)                = delete;

   private:
    T value_;
  };

  /// max_cached_bytes: reads the limit; assignment is SetMaxCachedBytes.
  class max_cached_bytes_field {
   public:
    max_cached_bytes_field(max_cached_bytes_field const&) = delete;
    [[nodiscard]] operator std::size_t() const noexcept;  // NOLINT(google-explicit-constructor)
    max_cached_bytes_field& operator=(std::size_t bytes);
    max_cached_bytes_field& operator=(max_cached_bytes_field const& other);
    max_cached_bytes_field& operator+=(std::size_t bytes);
    max_cached_bytes_field& operator-=(std::size_t bytes);

   private:
    friend class caching_device_allocator;
    explicit max_cached_bytes_field(caching_device_allocator& owner) noexcept : owner_{&owner} {}
    caching_device_allocator* owner_;
  };

  /// debug: reads and writes the allocator's debug switch (thread-safe).
  class debug_field {
   public:
    debug_field(debug_field const&) = delete;
    [[nodiscard]] operator bool() const noexcept;  // NOLINT(google-explicit-constructor)
    debug_field& operator=(bool on) noexcept;
    debug_field& operator=(debug_field const& other) noexcept;

   private:
    friend class caching_device_allocator;
    explicit debug_field(caching_device_allocator& owner) noexcept : owner_{&owner} {}
    caching_device_allocator* owner_;
  };

  /// cached_bytes / cached_blocks / live_blocks: read-only views of the bookkeeping. Call it for a
  /// snapshot (a copy); size() / empty() (and, for cached_bytes, operator[] / count) read as the
  /// CUB's containers do. No write compiles.
  template <class Snapshot>
  class snapshot_field {
   public:
    snapshot_field(snapshot_field const&)            = delete;
    snapshot_field& operator=(snapshot_field const&) = delete;
    template <class U>
    snapshot_field& operator=(U&&)
    {
      static_assert(detail::caching::always_false<U>,
                    "caching_device_allocator: cached_bytes, cached_blocks and live_blocks are "
                    "read-only views of the allocator's bookkeeping; use DeviceFree / "
                    "FreeAllCached / SetMaxCachedBytes to change what is cached");
      return *this;
    }
    /// A copy of the current contents.
    [[nodiscard]] Snapshot operator()() const { return (owner_->*make_)(); }
    [[nodiscard]] std::size_t size() const { return (*this)().size(); }
    [[nodiscard]] bool empty() const { return (*this)().empty(); }
    /// cached_bytes[device]: the device's totals ({0, 0} for a device never used); const, so that
    /// `a.cached_bytes[d].free = n` does not compile.
    // NOLINTNEXTLINE(readability-const-return-type)
    [[nodiscard]] TotalBytes const operator[](
        int device) const requires std::same_as<Snapshot, GpuCachedBytes>
    {
      auto const all = (*this)();
      auto const it  = all.find(device);
      return it == all.end() ? TotalBytes{} : it->second;
    }
    [[nodiscard]] std::size_t count(
        int device) const requires std::same_as<Snapshot, GpuCachedBytes>
    {
      return (*this)().count(device);
    }

   private:
    friend class caching_device_allocator;
    using make_fn = Snapshot (caching_device_allocator::*)() const;
    snapshot_field(caching_device_allocator const& owner, make_fn make) noexcept
        : owner_{&owner}, make_{make}
    {
    }
    caching_device_allocator const* owner_;
    make_fn make_;
  };

  // Not const: the fields' own operators reject writes with a message (a const member would fail
  // with a plain "discards qualifiers").
  fixed_field<unsigned int> bin_growth;         ///< geometric growth factor
  fixed_field<unsigned int> min_bin;            ///< minimum bin enumeration
  fixed_field<unsigned int> max_bin;            ///< maximum bin (INVALID_BIN: none)
  fixed_field<std::size_t> min_bin_bytes;       ///< minimum bin size
  fixed_field<std::size_t> max_bin_bytes;       ///< maximum bin size
  max_cached_bytes_field max_cached_bytes;      ///< maximum aggregate cached bytes per device
  bool const skip_cleanup;                      ///< skip FreeAllCached() in the destructor
  debug_field debug;                            ///< print (de)allocation events
  snapshot_field<GpuCachedBytes> cached_bytes;  ///< per device: {free (cached), live} bytes
  snapshot_field<CachedBlocks> cached_blocks;   ///< cached blocks, ordered by size
  snapshot_field<BusyBlocks> live_blocks;       ///< live blocks, ordered by pointer

 private:
  class runtime_source final : public detail::caching::block_source {
   public:
    explicit runtime_source(gpumem::runtime& rt) : rt_{rt} {}
    void* allocate(int device, std::size_t bytes, cudaStream_t stream) override;
    void free(int device, void* ptr, std::size_t bytes, cudaStream_t stream) noexcept override;

   private:
    gpumem::runtime& rt_;
  };

  template <class F>
  cudaError_t guarded(F&& f) noexcept;
  [[nodiscard]] GpuCachedBytes snapshot_cached_bytes() const;
  [[nodiscard]] CachedBlocks snapshot_cached_blocks() const;
  [[nodiscard]] BusyBlocks snapshot_live_blocks() const;

  gpumem::runtime* runtime_;
  runtime_source source_;
  detail::caching::caching_core core_;
};

/// CUB's spelling.
using CachingDeviceAllocator = caching_device_allocator;

namespace detail::caching {
/// The earlier name of caching_device_allocator::fixed_field.
template <class T>
using fixed_field = caching_device_allocator::fixed_field<T>;
}  // namespace detail::caching

}  // namespace gpumem
