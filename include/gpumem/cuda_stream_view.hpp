// gpumem/cuda_stream_view.hpp — a non-owning view of a CUDA stream.
//
// The view is a value (a cudaStream_t). It never calls CUDA itself except in synchronize(),
// which is for real streams only; resources synchronize through their runtime (gpumem/runtime.hpp)
// so that the same code also runs over the host stand-in's simulated streams.
#pragma once

#include <cuda/stream_ref>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>

namespace gpumem {

class cuda_stream_view {
 public:
  constexpr cuda_stream_view() noexcept = default;
  constexpr cuda_stream_view(cudaStream_t stream) noexcept : stream_{stream} {}  // NOLINT
  constexpr cuda_stream_view(::cuda::stream_ref stream) noexcept
      : stream_{stream.get()} {}  // NOLINT
  cuda_stream_view(int)            = delete;
  cuda_stream_view(std::nullptr_t) = delete;

  [[nodiscard]] constexpr cudaStream_t value() const noexcept { return stream_; }
  constexpr operator cudaStream_t() const noexcept { return stream_; }  // NOLINT
  constexpr operator ::cuda::stream_ref() const noexcept
  {
    return ::cuda::stream_ref{stream_};
  }  // NOLINT

  /// True for cudaStreamPerThread (and for the default stream in per-thread compilation mode).
  [[nodiscard]] bool is_per_thread_default() const noexcept;
  /// True for the legacy default stream (0 or cudaStreamLegacy).
  [[nodiscard]] bool is_default() const noexcept;

  /// cudaStreamSynchronize on a real stream; throws cuda_error on failure.
  void synchronize() const;
  /// As synchronize(), but ignores failures.
  void synchronize_no_throw() const noexcept;

  friend constexpr bool operator==(cuda_stream_view a, cuda_stream_view b) noexcept
  {
    return a.stream_ == b.stream_;
  }

 private:
  cudaStream_t stream_{nullptr};
};

inline constexpr cuda_stream_view cuda_stream_default{};
inline const cuda_stream_view cuda_stream_legacy{cudaStreamLegacy};
inline const cuda_stream_view cuda_stream_per_thread{cudaStreamPerThread};

}  // namespace gpumem

template <>
struct std::hash<gpumem::cuda_stream_view> {
  std::size_t operator()(gpumem::cuda_stream_view s) const noexcept
  {
    return std::hash<void*>{}(static_cast<void*>(s.value()));
  }
};
