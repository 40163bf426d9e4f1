// The host stand-in's model of CUDA's virtual-memory API (internal to host_runtime).
//
// Address space: reservations, granularity-aligned, never overlapping. In `backed` mode a
// reservation is real host address space (mmap PROT_NONE): a mapped range becomes readable and
// writable, an unmapped one faults again, so a test that touches memory over an unmapped granule
// crashes as it would on a GPU. Otherwise addresses are simulated (nothing is touched).
// Physical handles: a size (multiple of the granularity), mappings counted; released handles are
// freed once their last mapping goes (as cuMemRelease of a mapped handle does).
// Mappings start with no access (backed: still faulting) until set_access. Mappings: the whole of
// one handle (CUDA refuses a part: CUDA_ERROR_NOT_SUPPORTED) at a granularity-aligned address
// inside one reservation, over no other mapping; an unmap must name a whole mapping. Misuse gives
// what CUDA gives: cuda_error (invalid value) from the calls that may throw, a recorded misuse from
// the noexcept ones (misuse_count(), and check_invariants() fails).
//
// Invariants (check_invariants()):
//   every mapping lies inside one reservation; mappings never overlap
//   a handle's mapping count == number of mappings of it; a released handle has mappings
//   physical_bytes() == sum of the sizes of live (unreleased or still mapped) handles
// Thread safety: none (host_runtime holds its mutex around every call).
#pragma once

#include <gpumem/detail/runtime.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace gpumem::detail {

class host_vmm_model {
 public:
  host_vmm_model(bool backed, std::size_t granularity);
  host_vmm_model(host_vmm_model const&)            = delete;
  host_vmm_model& operator=(host_vmm_model const&) = delete;
  ~host_vmm_model();

  [[nodiscard]] std::size_t granularity() const noexcept { return granularity_; }
  [[nodiscard]] void* reserve(std::size_t bytes, std::size_t alignment);
  void unreserve(void* base, std::size_t bytes) noexcept;
  /// Validates and records a handle and what it was made with; the caller has charged the
  /// capacity and checked the device.
  [[nodiscard]] vmm_handle create(std::size_t bytes, int device, vmm_handle_properties properties);
  /// A second handle to the physical memory of shareable handle `of` (an import of its export):
  /// the memory is freed when every handle to it is released and unmapped.
  [[nodiscard]] vmm_handle import(vmm_handle of);
  /// Returns the bytes that became free now (0 while the memory is still mapped or has another
  /// handle).
  [[nodiscard]] std::size_t release(vmm_handle handle) noexcept;
  void map(void* ptr, std::size_t bytes, vmm_handle handle);
  /// Returns the bytes that became free now (a released handle's last mapping went).
  [[nodiscard]] std::size_t unmap(void* ptr, std::size_t bytes) noexcept;
  /// Grants `device` (0..63) access to whole mappings covering [ptr, ptr + bytes) (throws unless
  /// wholly mapped).
  void set_access(void* ptr, std::size_t bytes, int device);
  /// True when the mapping holding `ptr` was given access by `device`.
  [[nodiscard]] bool accessible_by(void const* ptr, int device) const;
  /// Throws unless [ptr, ptr + bytes) is wholly mapped and accessible.
  void check_mapped(void* ptr, std::size_t bytes) const;
  /// A copy's source or destination: throws unless [ptr, ptr + bytes) lies outside every
  /// reservation or is wholly mapped and accessible (CUDA's error for a copy of unmapped memory).
  void check_copy(void const* ptr, std::size_t bytes, char const* role) const;
  [[nodiscard]] bool shareable(vmm_handle handle) const;
  /// The mapping holding `ptr` and what its handle was made with; throws unless mapped.
  [[nodiscard]] vmm_allocation_info allocation_at(void const* ptr) const;
  /// The mappings (address, bytes) that tile [ptr, ptr + bytes) exactly; empty when they do not
  /// (a gap, or a mapping crossing either end).
  [[nodiscard]] std::vector<std::pair<void*, std::size_t>> whole_mappings(
      void* ptr, std::size_t bytes) const noexcept;

  [[nodiscard]] std::size_t physical_bytes() const noexcept { return physical_; }
  [[nodiscard]] std::size_t mapped_bytes() const noexcept;
  [[nodiscard]] std::size_t reservations() const noexcept { return reservations_.size(); }
  [[nodiscard]] std::size_t handles() const noexcept { return handles_.size(); }
  [[nodiscard]] std::size_t mappings() const noexcept { return mappings_.size(); }
  [[nodiscard]] std::uint64_t misuse_count() const noexcept { return misuse_; }
  [[nodiscard]] std::string const& last_misuse() const noexcept { return last_misuse_; }
  void check_invariants() const;

 private:
  struct handle_rec {
    std::size_t bytes{};
    int device{};
    vmm_handle_properties properties;
    bool released{};
    std::size_t mappings{};
    vmm_handle memory{};  // the physical memory: the handle that created it
  };
  struct mapping_rec {
    std::size_t bytes{};
    vmm_handle handle{};
    bool accessible{};        // set_access called (mappings start with no access, as in CUDA)
    std::uint64_t devices{};  // bit d: device d was given access
  };
  /// Calls f(mapping) for the mappings covering [ptr, ptr + bytes); throws unless wholly mapped.
  template <class F>
  void for_range(void* ptr, std::size_t bytes, F&& f) const;

  [[nodiscard]] std::uintptr_t find_gap(std::size_t bytes, std::size_t alignment) const;
  [[nodiscard]] bool inside_one_reservation(std::uintptr_t addr, std::size_t bytes) const;
  [[nodiscard]] bool overlaps_mapping(std::uintptr_t addr, std::size_t bytes) const;
  [[nodiscard]] bool overlaps_reservation(std::uintptr_t addr, std::size_t bytes) const;
  void misuse(std::string what) noexcept;
  /// Forgets a released, unmapped handle; returns the bytes freed (its memory's last handle).
  [[nodiscard]] std::size_t forget(std::map<vmm_handle, handle_rec>::iterator it) noexcept;
  void protect(std::uintptr_t addr, std::size_t bytes, bool accessible) const noexcept;

  bool backed_;
  std::size_t granularity_;
  std::map<std::uintptr_t, std::size_t> reservations_;  // base -> bytes
  // backed: reservation base -> (mmap start, mmap length)
  std::map<std::uintptr_t, std::pair<std::uintptr_t, std::size_t>> host_maps_;
  std::map<vmm_handle, handle_rec> handles_;
  std::map<vmm_handle, std::size_t> memory_refs_;   // physical memory -> handles to it (>= 1)
  std::map<std::uintptr_t, mapping_rec> mappings_;  // address -> mapping
  vmm_handle next_handle_{1};
  std::size_t physical_{};  // == sum of live handles' bytes
  std::uint64_t misuse_{};
  std::string last_misuse_;
};

}  // namespace gpumem::detail
