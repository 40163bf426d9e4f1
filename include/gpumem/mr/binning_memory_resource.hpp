// gpumem/mr/binning_memory_resource.hpp — sends each request to the smallest bin whose size holds
// it, or to the upstream resource when it is larger than every bin.
//
// Bins are added with add_bin(size[, resource]); without a resource the bin is an owned
// fixed_size_memory_resource of that block size over the upstream. The exponent constructor adds
// bins 2^min .. 2^max. Bin sizes are rounded up to 256 bytes; adding an existing size changes
// nothing. Deallocation finds the bin from the size, so it must be the size that was allocated;
// a wrong size is caught for the bins it owns: a block of an owned bin freed with another size goes
// back to its own bin, and a pointer that no owned bin handed out, freed with an owned bin's size,
// is ignored; both are reported on stderr and counted in bad_deallocations().
//
// Invariants (check_invariants(), throws logic_error naming the broken one):
//   every bin size is a multiple of 256
//   each owned bin is the map's entry for its block size: bins_[b.get_block_size()] == b, and
//   the entries that name an owned bin are as many as the owned bins
//   each owned bin's own invariants
// Errors: logic_error for a null upstream or exponents outside 0 <= min <= max <= 62. Allocation
// errors are those of the bin or upstream.
// Thread safety: allocate/deallocate are as thread-safe as the bins and upstream (owned bins are);
// add_bin is not thread-safe.
#pragma once

#include <gpumem/mr/capabilities.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/fixed_size_memory_resource.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

namespace gpumem::mr {

template <class Upstream>
class binning_memory_resource : public device_memory_resource, public block_rounding {
 public:
  /// No bins: everything goes upstream until add_bin(). `runtime` (extension) is given to the
  /// fixed_size bins this resource creates.
  explicit binning_memory_resource(device_async_resource_ref upstream_resource,
                                   gpumem::runtime& runtime = gpumem::cuda_device())
      : upstream_{upstream_resource}, runtime_{&runtime}
  {
  }

  explicit binning_memory_resource(Upstream* upstream_resource,
                                   gpumem::runtime& runtime = gpumem::cuda_device())
      : binning_memory_resource{to_device_async_resource_ref_checked(upstream_resource), runtime}
  {
    this->link_upstream(upstream_resource);
  }

  /// Adds fixed_size bins of 2^min_size_exponent .. 2^max_size_exponent bytes.
  binning_memory_resource(device_async_resource_ref upstream_resource,
                          std::int8_t min_size_exponent, std::int8_t max_size_exponent,
                          gpumem::runtime& runtime = gpumem::cuda_device())
      : binning_memory_resource{upstream_resource, runtime}
  {
    GPUMEM_EXPECTS(
        0 <= min_size_exponent && min_size_exponent <= max_size_exponent && max_size_exponent <= 62,
        logic_error,
        detail::format("binning_memory_resource: bad exponent range [", int{min_size_exponent},
                       ", ", int{max_size_exponent}, "]"));
    for (int e = min_size_exponent; e <= max_size_exponent; ++e) { add_bin(std::size_t{1} << e); }
  }

  binning_memory_resource(Upstream* upstream_resource, std::int8_t min_size_exponent,
                          std::int8_t max_size_exponent,
                          gpumem::runtime& runtime = gpumem::cuda_device())
      : binning_memory_resource{to_device_async_resource_ref_checked(upstream_resource),
                                min_size_exponent, max_size_exponent, runtime}
  {
    this->link_upstream(upstream_resource);
  }

  /// Destroys the owned bins, which return their memory upstream.
  ~binning_memory_resource() override = default;

  binning_memory_resource(binning_memory_resource const&)            = delete;
  binning_memory_resource& operator=(binning_memory_resource const&) = delete;

  [[nodiscard]] device_async_resource_ref get_upstream_resource() const noexcept
  {
    return upstream_;
  }

  /// Serves requests of (previous bin size, allocation_size] from `bin_resource`, or from a new
  /// fixed_size_memory_resource of that block size. No change when the size already has a bin.
  /// Not thread-safe.
  void add_bin(std::size_t allocation_size,
               std::optional<device_async_resource_ref> bin_resource = std::nullopt)
  {
    allocation_size = align_up(allocation_size, CUDA_ALLOCATION_ALIGNMENT);
    if (bins_.contains(allocation_size)) { return; }
    if (bin_resource) {
      bins_.emplace(allocation_size, bin_entry{*bin_resource, nullptr});
      return;
    }
    auto& bin = owned_.emplace_back(std::make_unique<fixed_size_memory_resource<Upstream>>(
        upstream_, allocation_size,
        fixed_size_memory_resource<Upstream>::default_blocks_to_preallocate, *runtime_));
    bins_.emplace(allocation_size, bin_entry{device_async_resource_ref{*bin}, bin.get()});
  }

  /// The resource that serves `bytes`.
  /// The block size of the bin that serves a request of `bytes` (what such a request really
  /// takes); nullopt when the request is larger than every bin (it goes upstream).
  [[nodiscard]] std::optional<std::size_t> bin_size_for(std::size_t bytes) const noexcept
  {
    auto const it = bins_.lower_bound(bytes);
    return it == bins_.end() ? std::nullopt : std::optional<std::size_t>{it->first};
  }

  /// bin_size_for(bytes), 0 when the request goes upstream.
  [[nodiscard]] std::size_t block_for(std::size_t bytes) const override
  {
    return bin_size_for(bytes).value_or(0);
  }

  [[nodiscard]] device_async_resource_ref get_resource_ref(std::size_t bytes) const noexcept
  {
    auto const it = bins_.lower_bound(bytes);
    return it == bins_.end() ? upstream_ : it->second.ref;
  }

  /// Frees whose size did not match the allocation (they would reach the wrong bin or
  /// upstream): reported on stderr and counted here, with the owned bins' own bad frees.
  [[nodiscard]] std::uint64_t bad_deallocations() const noexcept
  {
    auto n = bad_frees_.load(std::memory_order_relaxed);
    for (auto const& bin : owned_) { n += bin->bad_deallocations(); }
    return n;
  }

  void check_invariants() const
  {
    std::size_t owned_entries = 0;
    for (auto const& [size, entry] : bins_) {
      GPUMEM_EXPECTS(
          is_aligned(size, CUDA_ALLOCATION_ALIGNMENT), logic_error,
          detail::format("binning_memory_resource: bin size ", size, " is not a multiple of 256"));
      owned_entries += entry.owned != nullptr ? 1 : 0;
    }
    GPUMEM_EXPECTS(
        owned_entries == owned_.size(), logic_error,
        detail::format("binning_memory_resource: ", owned_entries,
                       " bin entries name an owned bin, but ", owned_.size(), " bins are owned"));
    for (auto const& bin : owned_) {
      auto const it = bins_.find(bin->get_block_size());
      GPUMEM_EXPECTS(it != bins_.end() && it->second.owned == bin.get() &&
                         it->second.ref == device_async_resource_ref{*bin},
                     logic_error,
                     detail::format("binning_memory_resource: owned bin of ", bin->get_block_size(),
                                    " bytes is not its size's entry"));
      bin->check_invariants();
    }
  }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    return gpumem::detail::async_allocate(get_resource_ref(bytes), bytes, CUDA_ALLOCATION_ALIGNMENT,
                                          stream);
  }

  // One map lookup finds the size's bin; an owned bin frees the pointer if it handed it out (one
  // table probe). Otherwise every other owned bin is asked once (the size was wrong), and the
  // pointer goes to the size's resource (upstream or a given bin) only when none of them knew it.
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    auto const it   = bins_.lower_bound(bytes);
    auto const* bin = it == bins_.end() ? nullptr : &it->second;
    if (bin != nullptr && bin->owned != nullptr && bin->owned->try_deallocate(ptr, bytes, stream)) {
      return;
    }
    if (free_into_owner(ptr, bytes, stream, bin != nullptr ? bin->owned : nullptr)) { return; }
    if (bin != nullptr && bin->owned != nullptr) {
      report_wrong_size(ptr, bytes, 0);
      return;  // not freed: its owner (upstream or another resource) is unknown
    }
    auto target = bin != nullptr ? bin->ref : upstream_;
    gpumem::detail::async_deallocate(target, ptr, bytes, CUDA_ALLOCATION_ALIGNMENT, stream);
  }

  /// Frees `ptr` into the owned bin (other than `asked`) that handed it out, with that bin's
  /// size, reporting the wrong size (counted once, here). False when no owned bin handed it out.
  /// Each bin is asked with a read-only probe first: above the largest bin, nearly every pointer
  /// is upstream's, and a miss of the probe costs less than one of try_deallocate (measured: a
  /// free of 16 MiB over 15 bins took 17 % longer asking try_deallocate alone).
  bool free_into_owner(void* ptr, std::size_t bytes, cuda_stream_view stream,
                       fixed_size_memory_resource<Upstream> const* asked) noexcept
  {
    for (auto const& bin : owned_) {
      if (bin.get() == asked || !bin->handed_out_size(ptr)) { continue; }
      if (bin->try_deallocate(ptr, bin->get_block_size(), stream)) {
        report_wrong_size(ptr, bytes, bin->get_block_size());
        return true;
      }
    }
    return false;
  }

  void report_wrong_size(void const* ptr, std::size_t bytes, std::size_t block) noexcept
  {
    auto const count = bad_frees_.fetch_add(1, std::memory_order_relaxed) + 1;
    try {
      gpumem::detail::report_bad_deallocation(
          "binning_memory_resource", ptr, bytes,
          block != 0 ? gpumem::detail::format("size differs from the allocation (a block of the ",
                                              block, "-byte bin); freed into that bin")
                     : std::string{"not handed out by any of its bins (double free, foreign "
                                   "pointer or a size that is not the allocation's); ignored"},
          count);
    } catch (...) {  // NOLINT(bugprone-empty-catch): reporting must not throw
    }
  }

  device_async_resource_ref upstream_;
  gpumem::runtime* runtime_;
  std::vector<std::unique_ptr<fixed_size_memory_resource<Upstream>>> owned_;
  struct bin_entry {
    device_async_resource_ref ref;                // the bin
    fixed_size_memory_resource<Upstream>* owned;  // the same bin when owned, else null
  };
  std::map<std::size_t, bin_entry> bins_;  // block size -> bin
  std::atomic<std::uint64_t> bad_frees_{0};
};

static_assert(gpumem::detail::async_resource_with<binning_memory_resource<device_memory_resource>,
                                                  cuda::mr::device_accessible>);

}  // namespace gpumem::mr
