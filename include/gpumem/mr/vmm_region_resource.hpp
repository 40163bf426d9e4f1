// gpumem/mr/vmm_region_resource.hpp — allocations routed by region: one virtual-memory pool per
// region name ("tag"), so that each region's physical memory can be paused (given back, its
// contents discarded or offloaded to host memory or a file) and resumed at the same addresses on
// its own.
//
//   gpumem::mr::vmm_region_resource mr{options};
//   {
//     gpumem::mr::region_scope weights{mr, "weights"};   // this thread's allocations from mr
//     load_weights(mr);                                   // go to the "weights" region
//   }
//   mr.pause("weights", gpumem::pause_mode::offload);     // ... training runs ...
//   mr.resume("weights");                                 // the same pointers are valid again
//
// Regions: each is a vmm_pool_memory_resource with its own reserved address range and its own
// physical handles (pausing one region never touches another's memory), created on first use with
// the resource's options. Allocations outside any scope go to the region "default". region_scope
// is thread-local and nests (the innermost scope naming this resource wins); scopes naming another
// resource do not affect this one. Deallocation finds the region by address (any thread, any
// scope). pause/resume of one region, or of all, as vmm_pool_memory_resource's.
//
// Errors: logic_error for an empty region name, or for a pointer no region handed out (reported by
// deallocate, which never throws); paused_error when the current region is paused.
// Thread safety: allocate / deallocate from any thread; regions are created under a lock and live
// as long as the resource.
#pragma once

#include <gpumem/runtime.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/capabilities.hpp>
#include <gpumem/mr/vmm_pause.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <map>
#include <memory>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem::mr {

class vmm_region_resource final : public device_memory_resource, public trimmable {
 public:
  static constexpr char const* default_region = "default";

  /// The options a region's pool gets unless told otherwise: vmm_pool's defaults, except
  /// - handles of 256 MiB (up to 512 MiB between the ends of one growth, see vmm_pool_options::
  ///   handle_bytes): pause and resume cost the driver's create + map + grant (and
  ///   unmap + release) once per handle, so a region of large tensors (weights, KV cache) wakes
  ///   16 times faster than with 16 MiB handles; a region gives memory back in whole handles;
  /// - the pinned host copy of an offloaded region kept after resume: pinning host memory costs
  ///   as much time as the copy, and a region that sleeps once sleeps again (it holds host memory
  ///   the size of what was offloaded while awake).
  [[nodiscard]] static vmm_pool_options default_options() noexcept
  {
    vmm_pool_options o;
    o.handle_bytes         = std::size_t{256} << 20;
    o.keep_offload_staging = true;
    return o;
  }

  /// Every region's pool gets `options` (reserve_bytes: address space per region).
  explicit vmm_region_resource(vmm_pool_options const& options = default_options(),
                               gpumem::runtime& runtime        = gpumem::cuda_device());
  ~vmm_region_resource() override;
  vmm_region_resource(vmm_region_resource const&)            = delete;
  vmm_region_resource& operator=(vmm_region_resource const&) = delete;

  /// The pool of region `tag`, created on first use. Throws logic_error for an empty name.
  vmm_pool_memory_resource& region(std::string_view tag);
  /// The region names so far, sorted.
  [[nodiscard]] std::vector<std::string> regions() const;
  /// The region this thread's allocations from this resource go to now.
  [[nodiscard]] std::string current_region() const;

  /// The pool of existing region `tag`; logic_error naming the regions when there is none.
  [[nodiscard]] vmm_pool_memory_resource& existing(std::string_view tag) const;
  /// Pauses region `tag` (see vmm_pool_memory_resource::pause). False when already paused.
  /// logic_error for a name no allocation or scope has used (existing()).
  bool pause(std::string_view tag, pause_mode mode) { return existing(tag).pause(mode); }
  /// As pause(tag, mode), synchronizing only `streams` (each once), not the device (see
  /// vmm_pool_memory_resource::pause(mode, streams)).
  bool pause(std::string_view tag, pause_mode mode, std::span<cuda_stream_view const> streams)
  {
    return existing(tag).pause(mode, streams);
  }
  /// Resumes region `tag`. False when active.
  bool resume(std::string_view tag) { return existing(tag).resume(); }
  /// Pauses every region; returns how many were paused by this call. Stops at the first failure
  /// (the regions paused before it stay paused).
  std::size_t pause_all(pause_mode mode);
  /// As pause_all(mode), each region synchronizing only `streams`, not the device.
  std::size_t pause_all(pause_mode mode, std::span<cuda_stream_view const> streams);
  /// Resumes every region; returns how many. Stops at the first failure.
  std::size_t resume_all();
  /// Releases the free memory of every region's pool (its trim_to(0)); paused regions hold none.
  void trim() override;
  [[nodiscard]] pause_state state(std::string_view tag) const { return existing(tag).state(); }
  [[nodiscard]] vmm_pool_stats stats(std::string_view tag) const { return existing(tag).stats(); }
  /// Deallocations of pointers no region handed out.
  [[nodiscard]] std::uint64_t bad_deallocations() const noexcept { return bad_frees_.load(); }
  void check_invariants() const;

  [[nodiscard]] bool supports_streams() const noexcept override { return true; }

 private:
  friend class region_scope;
  struct entry {
    std::string name;
    std::unique_ptr<vmm_pool_memory_resource> pool;
  };
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;
  /// The pool the calling thread's allocations go to (innermost scope, or default).
  [[nodiscard]] vmm_pool_memory_resource& current() const;
  [[nodiscard]] vmm_pool_memory_resource* owner_of(void const* ptr) const noexcept;

  vmm_pool_options options_;
  gpumem::runtime* runtime_;
  mutable std::shared_mutex mutex_;  // guards regions_ and by_base_
  std::map<std::string, entry, std::less<>> regions_;
  struct range {
    std::size_t bytes{};
    vmm_pool_memory_resource* pool{};
  };
  std::map<char const*, range> by_address_;  // reserved range start -> its pool
  vmm_pool_memory_resource* default_{};
  std::atomic<std::uint64_t> bad_frees_{};
};

/// Routes this thread's allocations from `resource` to region `tag` until destroyed (nestable;
/// destroy in reverse order of construction, as any scope). Creates the region if needed: throws
/// logic_error for an empty name.
class region_scope {
 public:
  region_scope(vmm_region_resource& resource, std::string_view tag);
  ~region_scope();
  region_scope(region_scope const&)            = delete;
  region_scope& operator=(region_scope const&) = delete;

 private:
  std::size_t depth_;  // this scope's place in the thread's stack
};

}  // namespace gpumem::mr
