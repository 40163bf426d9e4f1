// The GPU or the simulated device, for one resource run.
#include "device.hpp"

#include <gpumem/error.hpp>

namespace gpumem::tool {

std::string why_no_gpu()
{
  int count         = 0;
  auto const status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string{"no usable CUDA device ("} + cudaGetErrorName(status) + ": " +
           cudaGetErrorString(status) + ")";
  }
  if (count == 0) { return "no CUDA device"; }
  return {};
}

target::target(target_options const& options)
{
  if (options.simulate) {
    host_  = std::make_unique<detail::host_runtime>(detail::host_runtime_options{
         .capacity_bytes = options.capacity_bytes, .backed = false, .auto_complete = true});
    meter_ = std::make_unique<trace::metered_runtime>(*host_);
  } else {
    meter_ = std::make_unique<trace::metered_runtime>(gpumem::cuda_device());
  }
}

target::~target()
{
  if (host_ == nullptr) {
    (void)cudaDeviceSynchronize();
    for (auto s : owned_) { (void)cudaStreamDestroy(s); }
  }
}

cudaStream_t target::new_stream()
{
  cudaStream_t s = nullptr;
  if (host_ != nullptr) {
    s = host_->create_stream();
  } else {
    GPUMEM_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  }
  owned_.push_back(s);
  return s;
}

cudaStream_t target::stream_of(std::uint64_t id)
{
  if (id == 0) { return nullptr; }
  auto it = by_id_.find(id);
  if (it == by_id_.end()) { it = by_id_.emplace(id, new_stream()).first; }
  return it->second;
}

void target::synchronize()
{
  if (host_ != nullptr) {
    host_->complete_all();
  } else {
    GPUMEM_CUDA_TRY(cudaDeviceSynchronize());
  }
}

}  // namespace gpumem::tool
