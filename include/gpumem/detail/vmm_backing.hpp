// gpumem/detail/vmm_backing.hpp — one reserved range of device address space, backed by physical
// memory on demand (not API; the virtual-memory pool's slow paths).
//
// The range is tiled by mappings (a physical handle mapped whole at an address) and unmapped
// ranges. The pool's free lists and handed-out blocks cover exactly the mapped bytes; this class
// never sees handed-out blocks, only the pool's *idle* free list (memory no stream is using: the
// pool synchronized before handing it over), which it may change:
//   extend(idle, n, may_move)
//                     makes idle hold a block of n bytes: picks the unmapped range whose mapping
//                     joins the most free memory already mapped next to it, fills it first with
//                     handles taken from free holes elsewhere (unmapped there, mapped here: address
//                     fragmentation never costs physical memory), and only then with a new handle
//                     (plus growth_percent of what is mapped, to amortize the driver calls);
//                     without may_move, only with new handles (plus busy_growth_percent).
//   release_idle(idle, keep)  unmaps and releases handles lying wholly in idle free blocks, largest
//                     first, until at most `keep` bytes are mapped (trim, release threshold, OOM).
// Every driver call that may fail comes after the new idle list is built, and a failure unwinds:
// the idle list and the tiling always agree with what is really mapped.
//
// Invariants (check()):
//   mapped_bytes_ == sum of mapping sizes; mappings and unmapped ranges are disjoint, lie in the
//   reservation and cover it exactly; unmapped ranges are coalesced;
//   every block (free or handed out) lies inside one run of adjacent mappings;
//   sum of block sizes == mapped_bytes_.
// Thread safety: none (the pool calls it under its grow lock).
#pragma once

#include <gpumem/detail/coalescing_free_list.hpp>
#include <gpumem/detail/free_block.hpp>
#include <gpumem/detail/runtime.hpp>

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace gpumem::detail {

struct vmm_backing_options {
  std::size_t reserve_bytes{};      ///< 0: twice the device's memory
  std::size_t granularity_bytes{};  ///< 0: the device's recommended granularity
  unsigned growth_percent{};        ///< new physical memory taken beyond a need, in % of mapped
  unsigned busy_growth_percent{};   ///< the same, for a growth that may not move memory
  std::size_t handle_bytes{};       ///< largest new handle (0: one handle per growth)
  int device{-1};                   ///< -1: the current device
  std::vector<int> peers{};         ///< other devices given read-write access to every mapping
  bool all_peers{false};            ///< also every other device with peer capability
};

class vmm_backing {
 public:
  /// Queries the granularity (cuda_error when the device has no virtual memory management) and
  /// reserves the range. Throws logic_error for a granularity that is not a multiple of the
  /// device's, out_of_memory when the address space cannot be reserved.
  vmm_backing(runtime& rt, vmm_backing_options const& options);
  vmm_backing(vmm_backing const&)            = delete;
  vmm_backing& operator=(vmm_backing const&) = delete;
  /// Unmaps and releases everything and gives the range back.
  ~vmm_backing();

  [[nodiscard]] free_block range() const noexcept { return {base_, reserved_, 0}; }
  [[nodiscard]] std::size_t granularity() const noexcept { return granularity_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  /// The other devices that get access to every mapping (validated at construction).
  [[nodiscard]] std::vector<int> const& peers() const noexcept { return peers_; }
  [[nodiscard]] std::size_t mapped_bytes() const noexcept { return mapped_bytes_; }
  [[nodiscard]] std::size_t handle_count() const noexcept { return mapped_.size(); }
  [[nodiscard]] std::size_t unmapped_bytes() const noexcept { return reserved_ - mapped_bytes_; }
  [[nodiscard]] std::size_t largest_unmapped() const noexcept;

  /// See the top of this file. Throws out_of_memory (nothing changed, or handles released on the
  /// way out of a failed driver call) when the device or the range cannot provide n bytes.
  /// may_move false: new handles only (no free memory is unmapped: the device may still use it).
  void extend(coalescing_free_list& idle, std::size_t n, bool may_move = true);
  /// See the top of this file; returns the bytes released.
  std::size_t release_idle(coalescing_free_list& idle, std::size_t keep_mapped_bytes) noexcept;
  void check(std::vector<free_block> const& blocks) const;

 private:
  struct mapping {
    std::size_t bytes{};
    vmm_handle handle{};
  };
  struct target {  // where extend() maps: [at, at + bytes) of one unmapped range
    char* at{};
    std::size_t bytes{};
    std::size_t room{};  // how far the mapping may still grow (in its direction)
    bool downward{};     // grows towards lower addresses (joins the free block above it)
    std::size_t cost{};  // bytes to map
  };
  struct piece {  // one handle to map at the target
    vmm_handle handle{};
    std::size_t bytes{};
    char* from{};     // its current address (a donor), or null (new)
    free_block in{};  // a donor's free block when it was found
  };

  [[nodiscard]] target plan(coalescing_free_list const& idle, std::size_t n) const;
  [[nodiscard]] std::vector<piece> idle_handles(coalescing_free_list const& idle,
                                                target const* excluded) const;
  /// Carves the donors' ranges out of idle (host memory only; a failure changes nothing).
  static void take_out(coalescing_free_list& idle, std::vector<piece> const& pieces);
  std::vector<piece> fill(target& t, std::vector<piece> donors, std::size_t growth);
  void create_pieces(std::size_t bytes, std::vector<piece>& out);
  void execute(coalescing_free_list& idle, target const& t, std::vector<piece>& pieces);
  void unmap_donor(piece const& p) noexcept;
  void map_at(char* at, piece const& p);
  void unmap_range(char* at, std::size_t bytes) noexcept;
  void add_unmapped(char* at, std::size_t bytes);
  void take_unmapped(char* at, std::size_t bytes);
  [[nodiscard]] std::string describe() const;

  runtime* runtime_;
  int device_;
  std::vector<int> peers_;  ///< devices given access besides device_ (peer capable)
  std::size_t granularity_;
  std::size_t reserved_;
  unsigned growth_percent_;
  unsigned busy_growth_percent_;
  std::size_t handle_bytes_{};  // largest new handle, a multiple of the granularity
  char* base_{};
  std::uint32_t idle_chunk_{};             // the chunk number the pool's blocks carry
  std::map<char*, mapping> mapped_;        // address -> mapping
  std::map<char*, std::size_t> unmapped_;  // address -> bytes, coalesced
  std::size_t mapped_bytes_{};             // == sum of mapped_ sizes
};

}  // namespace gpumem::detail
