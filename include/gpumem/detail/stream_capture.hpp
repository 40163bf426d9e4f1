// gpumem/detail/stream_capture.hpp — the errors CUDA gives while a stream is being captured into a
// CUDA graph, turned into one message that says what to do. Not API.
//
// During a global-mode capture (the default mode) CUDA refuses calls that could synchronize with
// the captured work — cudaMalloc, event and stream queries and synchronizations — from every
// thread, and invalidates the capture. gpumem's suballocators make such calls when they grow, wait
// for freed memory or recover from running out; the driver's pool (cuda_async_memory_resource)
// does not: its allocations are captured as graph memory
// nodes.
#pragma once

#include <cuda_runtime_api.h>

namespace gpumem::detail {

/// True for the status codes CUDA returns for calls that stream capture forbids or broke.
[[nodiscard]] bool is_stream_capture_error(cudaError_t status) noexcept;

/// Throws cuda_error(status) saying that `call` cannot run while a stream is being captured and
/// what to use instead. GPUMEM_CUDA_TRY throws this for every capture error (src/error.cpp).
[[noreturn]] void throw_stream_capture_error(cudaError_t status, char const* call);

}  // namespace gpumem::detail
