// gpumem/mr/caching_memory_resource.hpp — the CUB-style caching allocator as a memory resource,
// over any upstream (same core as gpumem::caching_device_allocator).
//
// Requests are binned geometrically (options.bin_growth^min_bin .. ^max_bin): smaller ones are
// rounded up to the smallest bin, larger ones pass through to upstream and are freed there on
// deallocate. A freed binned block is cached while the cached bytes stay within
// max_cached_bytes; it is reused at once on the stream it was freed on, and on another stream once
// the work submitted to that stream before the free has completed (its event, queried through the
// runtime). Serves the device current at construction, which must be current when it is used.
// Bad frees (unknown pointer or double free, wrong size) are reported on stderr and counted by
// bad_deallocations(); nothing is freed for an unknown pointer; a wrong size frees the block.
// Destruction frees the cache and every block still allocated to the upstream (those are then
// said on stderr, with their count and bytes): nothing it took from upstream is left behind.
// Thread safety: thread-safe; one lock (per device), as CUB's allocator.
#pragma once

#include <gpumem/mr/capabilities.hpp>
#include <gpumem/detail/caching/block_source.hpp>
#include <gpumem/detail/caching/caching_core.hpp>
#include <gpumem/runtime.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/resource_ref.hpp>

#include <atomic>
#include <cstddef>
#include <iosfwd>

namespace gpumem::mr {

/// Configuration of caching_memory_resource; the defaults are CUB's CachingDeviceAllocator's.
struct caching_memory_resource_options {
  unsigned bin_growth{8};
  unsigned min_bin{3};
  unsigned max_bin{7};  ///< caching::invalid_bin: no maximum
  std::size_t max_cached_bytes{(std::size_t{2} << 20) * 3 - 1};  ///< 6,291,455
  bool debug{false};                                             ///< print (de)allocation events
};

class caching_memory_resource final : public device_memory_resource, public block_rounding {
 public:
  /// Throws logic_error for a null upstream or an invalid bin layout.
  template <class Upstream>
  explicit caching_memory_resource(Upstream* upstream, caching_memory_resource_options options = {},
                                   gpumem::runtime& runtime = gpumem::cuda_device())
      : caching_memory_resource{to_device_async_resource_ref_checked(upstream), options, runtime}
  {
    this->link_upstream(upstream);
  }
  explicit caching_memory_resource(device_async_resource_ref upstream,
                                   caching_memory_resource_options options = {},
                                   gpumem::runtime& runtime                = gpumem::cuda_device());
  ~caching_memory_resource() override;
  caching_memory_resource(caching_memory_resource const&)            = delete;
  caching_memory_resource& operator=(caching_memory_resource const&) = delete;

  [[nodiscard]] device_async_resource_ref get_upstream_resource() const noexcept
  {
    return source_.upstream;
  }
  /// Frees every cached block to upstream.
  void free_all_cached() { core_.free_all_cached(); }
  /// New cache limit; frees nothing (see free_all_cached()).
  void set_max_cached_bytes(std::size_t bytes) { core_.set_max_cached_bytes(bytes); }
  [[nodiscard]] detail::caching::cached_totals cached_bytes() const
  {
    return core_.totals(device_);
  }
  void set_debug(bool on) noexcept { core_.set_debug(on); }
  void set_debug_stream(std::ostream& out) noexcept { core_.set_debug_stream(out); }
  [[nodiscard]] std::size_t bad_deallocations() const noexcept { return bad_deallocations_; }
  void check_invariants() const { core_.check_invariants(); }
  [[nodiscard]] detail::caching::caching_core const& core() const noexcept { return core_; }
  /// The bin size that serves `bytes`, or 0 when the request is larger than every bin.
  [[nodiscard]] std::size_t block_for(std::size_t bytes) const override
  {
    auto const choice = core_.layout().classify(bytes);
    return choice.bin != detail::caching::invalid_bin ? choice.bytes : 0;
  }

 private:
  struct upstream_source final : detail::caching::block_source {
    explicit upstream_source(device_async_resource_ref up) : upstream{up} {}
    void* allocate(int device, std::size_t bytes, cudaStream_t stream) override;
    void free(int device, void* ptr, std::size_t bytes, cudaStream_t stream) noexcept override;
    device_async_resource_ref upstream;
  };

  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;

  upstream_source source_;
  int device_;
  detail::caching::caching_core core_;
  std::atomic<std::size_t> bad_deallocations_{};
};

static_assert(
    gpumem::detail::async_resource_with<caching_memory_resource, cuda::mr::device_accessible>);

}  // namespace gpumem::mr
