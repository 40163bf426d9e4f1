// cuda_stream_view's CUDA-touching members and the device-id queries.
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/detail/runtime.hpp>
#include <gpumem/error.hpp>

namespace gpumem {

bool cuda_stream_view::is_per_thread_default() const noexcept
{
#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
  return stream_ == cudaStreamPerThread || stream_ == nullptr;
#else
  return stream_ == cudaStreamPerThread;
#endif
}

bool cuda_stream_view::is_default() const noexcept
{
#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
  return stream_ == cudaStreamLegacy;
#else
  return stream_ == cudaStreamLegacy || stream_ == nullptr;
#endif
}

void cuda_stream_view::synchronize() const
{
  gpumem::cuda_device().stream_synchronize(stream_);
}

void cuda_stream_view::synchronize_no_throw() const noexcept
{
  try {
    synchronize();
  } catch (...) {  // NOLINT(bugprone-empty-catch): documented to ignore failures
  }
}

cuda_device_id get_current_cuda_device()
{
  if (get_num_cuda_devices() == 0) { return cuda_device_id{0}; }
  return cuda_device_id{gpumem::cuda_device().current_device()};
}

int get_num_cuda_devices() noexcept
{
  return gpumem::cuda_device().device_count();
}

}  // namespace gpumem
