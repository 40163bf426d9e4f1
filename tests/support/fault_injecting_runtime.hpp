// tests/support/fault_injecting_runtime.hpp — a runtime that fails one chosen call.
//
// Forwards every call to an inner runtime (the host stand-in) and counts the calls of each kind.
// Armed with (kind, n), the n-th call of that kind from then on fails once, as CUDA fails it:
//   * a call that may throw throws the gpumem exception the real runtime throws for the error
//     CUDA documents for it (out_of_memory for cudaErrorMemoryAllocation and
//     CUDA_ERROR_OUT_OF_MEMORY, cuda_error otherwise); the message names the CUDA call;
//   * a memory-pool call returns the status CUDA documents for it (the pool API turns it into its
//     own error, naming the status);
//   * a call that cannot report (free, event_destroy, vmm_unmap, vmm_release, vmm_unreserve: the
//     real runtime swallows their status; free_async and mem_pool_destroy, whose status the pool
//     API ignores) is refused: the work is not done, as when CUDA returns
//     an error. The refused calls are kept, and settle() performs them late, so that a test can
//     tell what the stack leaked from what the refusal left behind. An unreserve of a range in
//     which a refused unmap left a mapping is refused as well (CUDA refuses it too).
// Thread safety: all members are thread-safe (one mutex around the counters and the arming).
#pragma once

#include <gpumem/detail/forwarding_runtime.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace gpumem::test {

enum class fault_kind : std::uint8_t {
  allocate,
  free,
  memory_info,
  prefetch,
  advise,
  current_device,
  device_attribute,
  event_create,
  event_destroy,
  event_record,
  event_query,
  event_synchronize,
  stream_wait_event,
  stream_synchronize,
  device_synchronize,
  vmm_granularity,
  vmm_reserve,
  vmm_unreserve,
  vmm_create,
  vmm_release,
  vmm_map,
  vmm_unmap,
  vmm_set_access,
  vmm_export_fd,
  vmm_import_fd,
  mem_pool_create,
  mem_pool_destroy,
  mem_pool_set_attribute,
  mem_pool_get_attribute,
  mem_pool_trim_to,
  malloc_from_pool_async,
  free_async,
  device_get_default_mem_pool,
  device_get_mem_pool,
  count_,
};

inline constexpr std::size_t fault_kind_count = static_cast<std::size_t>(fault_kind::count_);

[[nodiscard]] char const* to_string(fault_kind kind) noexcept;
/// The CUDA call a kind stands for ("cudaMalloc", "cuMemMap", ...).
[[nodiscard]] char const* cuda_call(fault_kind kind) noexcept;
/// True for the kinds whose failure the runtime seam cannot report (they are refused instead).
[[nodiscard]] bool is_silent(fault_kind kind) noexcept;

using fault_counts = std::array<std::uint64_t, fault_kind_count>;

class fault_injecting_runtime final : public detail::forwarding_runtime {
 public:
  explicit fault_injecting_runtime(detail::runtime& inner) : forwarding_runtime{inner} {}
  ~fault_injecting_runtime() override;

  /// The n-th (from 1) call of `kind` counted from now fails once.
  void arm(fault_kind kind, std::uint64_t n);
  void disarm();
  /// True once the armed call failed.
  [[nodiscard]] bool fired() const;
  /// What the failure said (empty before it fired).
  [[nodiscard]] std::string fired_message() const;
  /// The CUDA status of the failure ("cudaErrorMemoryAllocation", "CUDA_ERROR_OUT_OF_MEMORY").
  [[nodiscard]] std::string fired_status() const;
  /// Calls of each kind so far (a refused or failed call counts).
  [[nodiscard]] fault_counts counts() const;
  /// Performs the refused calls (unmaps, releases, frees, event destroys, then unreserves).
  void settle() noexcept;
  [[nodiscard]] std::size_t refused() const;

  void* allocate(detail::memory_kind kind, std::size_t bytes) override;
  void free(detail::memory_kind kind, void* ptr) noexcept override;
  detail::mem_info memory_info() override;
  void prefetch(void const* ptr, std::size_t bytes, detail::mem_location where,
                cudaStream_t stream) override;
  void advise_preferred_location(void const* ptr, std::size_t bytes,
                                 detail::mem_location where) override;
  int current_device() override;
  int device_attribute(cudaDeviceAttr attr, int device) override;
  cudaEvent_t event_create() override;
  void event_destroy(cudaEvent_t event) noexcept override;
  void event_record(cudaEvent_t event, cudaStream_t stream) override;
  bool event_query(cudaEvent_t event) override;
  void event_synchronize(cudaEvent_t event) override;
  void stream_wait_event(cudaStream_t stream, cudaEvent_t event) override;
  void stream_synchronize(cudaStream_t stream) override;
  void device_synchronize() override;
  std::size_t vmm_granularity(int device) override;
  void* vmm_reserve(std::size_t bytes, std::size_t alignment) override;
  void vmm_unreserve(void* base, std::size_t bytes) noexcept override;
  detail::vmm_handle vmm_create(std::size_t bytes, int device,
                                vmm_handle_properties properties) override;
  void vmm_release(detail::vmm_handle handle) noexcept override;
  void vmm_map(void* ptr, std::size_t bytes, detail::vmm_handle handle) override;
  void vmm_unmap(void* ptr, std::size_t bytes) noexcept override;
  void vmm_set_access(void* ptr, std::size_t bytes, int device) override;
  int vmm_export_fd(detail::vmm_handle handle) override;
  detail::vmm_handle vmm_import_fd(int fd) override;
  cudaError_t mem_pool_create(cudaMemPool_t* pool, cudaMemPoolProps const* props) noexcept override;
  cudaError_t mem_pool_destroy(cudaMemPool_t pool) noexcept override;
  cudaError_t mem_pool_set_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                     void* value) noexcept override;
  cudaError_t mem_pool_get_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                     void* value) noexcept override;
  cudaError_t mem_pool_trim_to(cudaMemPool_t pool, std::size_t keep) noexcept override;
  cudaError_t malloc_from_pool_async(void** ptr, std::size_t bytes, cudaMemPool_t pool,
                                     cudaStream_t stream) noexcept override;
  cudaError_t free_async(void* ptr, cudaStream_t stream) noexcept override;
  cudaError_t device_get_default_mem_pool(cudaMemPool_t* pool, int device) noexcept override;
  cudaError_t device_get_mem_pool(cudaMemPool_t* pool, int device) noexcept override;

 private:
  struct refusal {
    fault_kind kind{};
    detail::memory_kind memory{};
    void* ptr{};
    std::size_t bytes{};
    detail::vmm_handle handle{};
    cudaStream_t stream{};
  };

  /// Counts a call of `kind`; true when it is the armed one (then it has fired).
  [[nodiscard]] bool hit(fault_kind kind) noexcept;
  /// Counts a call of `kind` and throws what CUDA gives when it is the armed one.
  void maybe_fail(fault_kind kind);
  /// Counts a memory-pool call; the status it fails with when it is the armed one, else success.
  [[nodiscard]] cudaError_t pool_status(fault_kind kind) noexcept;
  /// Counts a silent call; true when it is refused (then `r` is kept for settle()).
  [[nodiscard]] bool refuse(refusal const& r) noexcept;
  /// True when a refused unmap left a mapping in [base, base + bytes).
  [[nodiscard]] bool holds_refused_mapping(void* base, std::size_t bytes) const noexcept;

  mutable std::mutex mutex_;
  fault_counts counts_{};
  fault_kind armed_kind_{};
  std::uint64_t armed_at_{};  ///< the count of armed_kind_ that fails; 0: disarmed
  bool fired_{};
  std::string message_;
  std::string status_;
  std::vector<refusal> refused_;
};

}  // namespace gpumem::test
