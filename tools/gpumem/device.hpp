// tools/gpumem/device.hpp — where a replay or benchmark runs: the GPU (cuda runtime, real streams)
// or the simulated device (host_runtime without memory, all work complete at once), and the
// metered runtime that measures a stack's footprint on it. One `target` per resource run.
#pragma once

#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/runtime/metered_runtime.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gpumem::tool {

/// Empty when a CUDA device is usable; otherwise why not, in words.
[[nodiscard]] std::string why_no_gpu();

struct target_options {
  bool simulate{};
  std::size_t capacity_bytes{std::size_t{80} << 30};
};

class target {
 public:
  explicit target(target_options const& options);
  ~target();
  target(target const&)            = delete;
  target& operator=(target const&) = delete;

  [[nodiscard]] bool simulated() const noexcept { return host_ != nullptr; }
  /// The runtime stacks are built over (metered).
  [[nodiscard]] trace::metered_runtime& meter() noexcept { return *meter_; }
  /// A stream for trace stream `id` (0: the default stream); created on first use.
  [[nodiscard]] cudaStream_t stream_of(std::uint64_t id);
  /// A new stream owned by this target.
  [[nodiscard]] cudaStream_t new_stream();
  void synchronize();

 private:
  std::unique_ptr<detail::host_runtime> host_;
  std::unique_ptr<trace::metered_runtime> meter_;
  std::unordered_map<std::uint64_t, cudaStream_t> by_id_;  ///< O(1) whatever the stream count
  std::vector<cudaStream_t> owned_;
};

}  // namespace gpumem::tool
