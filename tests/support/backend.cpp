#include "backend.hpp"

#include "kernels.hpp"

#include <gpumem/error.hpp>

#include <cuda_runtime_api.h>

#include <map>
#include <vector>

namespace gpumem::test {
namespace {

class host_backend final : public backend {
 public:
  explicit host_backend(detail::host_runtime_options opts) : rt_{opts} {}
  char const* name() const override { return "host"; }
  detail::runtime& runtime() override { return rt_; }
  bool host_accessible() const override { return rt_.options().backed; }
  cudaStream_t create_stream() override { return rt_.create_stream(); }
  void hold(cudaStream_t stream) override { rt_.enqueue(stream); }
  void release(cudaStream_t stream) override { rt_.stream_synchronize(stream); }
  bool ordered_after_held(cudaStream_t held, cudaStream_t other) override
  {
    rt_.enqueue(other);
    rt_.complete(other);
    bool const held_done = rt_.completed(held) == rt_.enqueued(held);
    bool const waits     = rt_.completed(other) < rt_.enqueued(other);
    return held_done || waits;
  }
  void synchronize() override { rt_.device_synchronize(); }

 private:
  detail::host_runtime rt_;
};

#ifdef GPUMEM_HAVE_TEST_KERNELS
class cuda_backend final : public backend {
 public:
  cuda_backend()
  {
    GPUMEM_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&flags_), sizeof(int) * max_flags));
    GPUMEM_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&out_), sizeof(int)));
  }
  ~cuda_backend() override
  {
    (void)cudaDeviceSynchronize();
    for (auto s : streams_) { (void)cudaStreamDestroy(s); }
    (void)cudaFree(flags_);
    (void)cudaFreeHost(out_);
  }
  char const* name() const override { return "cuda"; }
  detail::runtime& runtime() override { return detail::cuda_runtime(); }
  bool host_accessible() const override { return false; }
  cudaStream_t create_stream() override
  {
    cudaStream_t s{};
    GPUMEM_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    streams_.push_back(s);
    return s;
  }
  void hold(cudaStream_t stream) override
  {
    int* flag = flag_of(stream);
    GPUMEM_CUDA_TRY(cudaMemsetAsync(flag, 0, sizeof(int), stream));
    launch_spin_then_set(stream, flag, spin_ms);
  }
  void release(cudaStream_t stream) override { GPUMEM_CUDA_TRY(cudaStreamSynchronize(stream)); }
  bool ordered_after_held(cudaStream_t held, cudaStream_t other) override
  {
    launch_read_flag(other, flag_of(held), out_);
    GPUMEM_CUDA_TRY(cudaStreamSynchronize(other));
    return *out_ == 1;
  }
  void synchronize() override { GPUMEM_CUDA_TRY(cudaDeviceSynchronize()); }

 private:
  static constexpr int max_flags = 64;
  static constexpr int spin_ms   = 200;
  int* flag_of(cudaStream_t s)
  {
    auto [it, inserted] = slot_.try_emplace(s, static_cast<int>(slot_.size()));
    return flags_ + it->second;
  }
  int* flags_{};
  int* out_{};
  std::vector<cudaStream_t> streams_;
  std::map<cudaStream_t, int> slot_;
};
#endif

}  // namespace

std::string why_no_gpu()
{
  static std::string const reason = [] {
    int count{};
    auto const status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      return std::string{"no usable CUDA device ("} + cudaGetErrorName(status) + ")";
    }
    return count == 0 ? std::string{"no CUDA device"} : std::string{};
  }();
  return reason;
}

std::unique_ptr<backend> make_host_backend(detail::host_runtime_options opts)
{
  return std::make_unique<host_backend>(opts);
}

std::unique_ptr<backend> make_cuda_backend()
{
#ifdef GPUMEM_HAVE_TEST_KERNELS
  if (!gpu_available()) { return nullptr; }
  return std::make_unique<cuda_backend>();
#else
  return nullptr;
#endif
}

}  // namespace gpumem::test
