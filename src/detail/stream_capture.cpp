// Stream-capture errors with a message that says what to do (detail/stream_capture.hpp).
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/stream_capture.hpp>
#include <gpumem/error.hpp>

namespace gpumem::detail {

bool is_stream_capture_error(cudaError_t status) noexcept
{
  switch (status) {
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorStreamCaptureIsolation:
    case cudaErrorStreamCaptureUnmatched:
    case cudaErrorStreamCaptureUnjoined:
    case cudaErrorStreamCaptureMerge:
    case cudaErrorStreamCaptureWrongThread:
    case cudaErrorCapturedEvent:
      return true;
    default:
      return false;
  }
}

void throw_stream_capture_error(cudaError_t status, char const* call)
{
  throw cuda_error{
      status,
      format(call, " is not allowed while a stream is being captured into a CUDA graph (",
             cudaGetErrorName(status),
             "). gpumem's suballocators make this call to grow, to reuse memory freed on another "
             "stream or to recover from running out of memory. Allocate what the graph needs "
             "before the capture begins, or allocate inside the graph from "
             "cuda_async_memory_resource (the driver's pool), whose allocations are captured as "
             "graph nodes.")};
}

}  // namespace gpumem::detail
