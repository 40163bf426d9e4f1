// gpumem/mr/vmm_pool_options.hpp — the configuration of vmm_pool_memory_resource: every option
// and its default, written once. The pool hands this struct whole to the code that uses it (its
// address-space backing reads the growth and mapping fields, the pool the rest); the spec table and
// the Python bindings read their defaults from `vmm_pool_options{}`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gpumem::mr {

struct vmm_pool_options {
  std::size_t reserve_bytes{};      ///< address space reserved; 0: twice the device's memory
  std::size_t granularity_bytes{};  ///< granule size; 0: the device's recommended granularity
  unsigned growth_percent{};        ///< new physical memory beyond a need, in % of what is mapped
  /// The same, for a growth while the one stream using the pool still has work running: no free
  /// memory can move then, so each such growth is new memory. 0 by default: each such growth
  /// costs tens of microseconds per handle, and memory taken ahead of a need while the device is
  /// busy stays held (12 % here made PyTorch's GPT-2 training hold 13 % more device memory).
  unsigned busy_growth_percent{0};
  /// Largest physical handle at either end of a growth's new memory; between its ends, handles
  /// are up to twice as large (memory one large request covers whole: fewer driver calls). 0 (or a
  /// size too large to round up to granules, such as SIZE_MAX): one handle per growth.
  std::size_t handle_bytes{std::size_t{16} << 20};
  std::size_t release_threshold_bytes{SIZE_MAX};  ///< free memory kept mapped at a growth
  /// Physical handles that a trim or the release threshold unmaps are kept, unmapped, up to this
  /// many bytes, and a later growth maps them again instead of creating new ones (no cuMemCreate).
  /// They are device memory the pool holds (stats: spare_bytes, held_bytes). Four handles of the
  /// default size: a re-growth of up to 64 MiB after a trim creates nothing, for less than 0.1 %
  /// of a current data-center GPU's memory. 0: a trim releases everything it unmaps.
  std::size_t spare_bytes{std::size_t{64} << 20};
  /// When a free leaves the whole pool free again, the next allocation moves the free handles
  /// that growths moved since the last such moment back where they were then (once the stream's
  /// work is done; no wait), so a job run again and again over the pool starts every run from the
  /// same layout and its footprint does not creep up. false: the layout stays where the last run
  /// left it (no driver call at such moments).
  bool return_home{true};
  int device{-1};  ///< -1: the current device
  /// Other devices given read-write access to all of the pool's memory (peer access: their
  /// kernels and copies may use it). Each must have peer capability with the pool's device.
  std::vector<int> peer_devices{};
  /// Gives every other device with peer capability access (adds to peer_devices).
  bool all_peers{false};
  /// Keeps the pinned host memory of pause(offload) after resume() for the next offload (pinning
  /// host memory costs about as much time as the copy); false: freed by resume().
  bool keep_offload_staging{false};
  /// Where pause(pause_mode::offload_to_file) writes the contents: a temporary file in this
  /// directory, with no name (or unlinked at once: nothing is left behind, even if the process
  /// dies), closed by resume() or the destructor. Empty: the TMPDIR environment variable, else
  /// /tmp.
  std::string offload_directory{};
  /// Physical memory exportable as POSIX file descriptors
  /// (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), as NCCL's user-buffer registration
  /// (ncclCommRegister) and other processes need.
  bool shareable_handles{false};
  /// Physical memory marked GPUDirect RDMA capable where the device supports it
  /// (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED), as NCCL asks for memory that
  /// network adapters reach; ignored on a device that does not support it.
  bool gpu_direct_rdma{false};
};

}  // namespace gpumem::mr
