// tests/support/backend.hpp — what a test needs of "the machine": a runtime, streams, and a way
// to keep work pending on a stream. Two backends run the same suites:
//   host: the host stand-in (detail::host_runtime); pending work is held until released, so
//         ordering assertions are deterministic.
//   cuda: the real GPU; pending work is a spinning kernel (tests/support/kernels.cu) that ends
//         by itself after a while. Unavailable (nullptr) without a GPU or without test kernels.
#pragma once

#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/detail/runtime.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace gpumem::test {

/// Empty when a CUDA device is usable; otherwise why not (for skip messages).
[[nodiscard]] std::string why_no_gpu();
[[nodiscard]] inline bool gpu_available()
{
  return why_no_gpu().empty();
}

#define GPUMEM_SKIP_WITHOUT_GPU()                                           \
  do {                                                                      \
    if (!::gpumem::test::gpu_available()) {                                 \
      GTEST_SKIP() << "GPU test skipped: " << ::gpumem::test::why_no_gpu(); \
    }                                                                       \
  } while (0)

class backend {
 public:
  virtual ~backend()                               = default;
  [[nodiscard]] virtual char const* name() const   = 0;
  [[nodiscard]] virtual detail::runtime& runtime() = 0;
  /// True when allocations can be read and written from the host (host backend, backed memory).
  [[nodiscard]] virtual bool host_accessible() const = 0;
  /// A stream owned by the backend (destroyed with it).
  [[nodiscard]] virtual cudaStream_t create_stream() = 0;
  /// Puts work on `stream` that stays unfinished for a while (host: until release()).
  virtual void hold(cudaStream_t stream) = 0;
  /// Lets the held work on `stream` finish and waits for it.
  virtual void release(cudaStream_t stream) = 0;
  /// Enqueues work on `other` now and reports whether it was ordered after the work held on
  /// `held` (or that work had already finished). False means a stream-ordering violation.
  [[nodiscard]] virtual bool ordered_after_held(cudaStream_t held, cudaStream_t other) = 0;
  virtual void synchronize()                                                           = 0;
};

[[nodiscard]] std::unique_ptr<backend> make_host_backend(detail::host_runtime_options opts = {});
/// nullptr when no GPU is usable or the test kernels were not built.
[[nodiscard]] std::unique_ptr<backend> make_cuda_backend();

/// Backend tags for typed suites.
struct host_backend_tag {
  static constexpr char const* name = "host";
  static std::unique_ptr<backend> make() { return make_host_backend(); }
};
struct cuda_backend_tag {
  static constexpr char const* name = "cuda";
  static std::unique_ptr<backend> make() { return make_cuda_backend(); }
};

}  // namespace gpumem::test
