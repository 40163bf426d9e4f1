// gpumem/error.hpp — the exception types of gpumem and the one macro family that raises them.
//
// Hierarchy (what a caller catches):
//   std::bad_alloc
//     gpumem::bad_alloc            an allocation could not be satisfied
//       gpumem::out_of_memory      ... because memory is exhausted (says asked / free /
//       fragmentation)
//   std::logic_error
//     gpumem::logic_error          misuse: bad arguments, bad alignment, null upstream, double free
//   std::out_of_range
//     gpumem::out_of_range         an index past the end (device_uvector's element access)
//   std::runtime_error
//     gpumem::cuda_error           a CUDA call failed; carries the status and the call site
#pragma once

#include <cuda_runtime_api.h>

#include <new>
#include <stdexcept>
#include <string>
#include <string_view>

namespace gpumem {

/// An allocation could not be satisfied. what() names the request and the resource.
class bad_alloc : public std::bad_alloc {
 public:
  explicit bad_alloc(std::string msg) : msg_{std::move(msg)} {}
  [[nodiscard]] const char* what() const noexcept override { return msg_.c_str(); }

 private:
  std::string msg_;
};

/// Memory is exhausted. what() says how much was asked, how much is free, how fragmented.
class out_of_memory : public bad_alloc {
 public:
  using bad_alloc::bad_alloc;
};

/// Misuse of the API (bad argument, bad alignment, null upstream, foreign or double free).
class logic_error : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// An index past the end of a container (device_uvector's element access; RMM's out_of_range).
class out_of_range : public std::out_of_range {
 public:
  using std::out_of_range::out_of_range;
};

/// A CUDA runtime call failed.
class cuda_error : public std::runtime_error {
 public:
  cuda_error(cudaError_t status, std::string const& msg) : std::runtime_error{msg}, status_{status}
  {
  }
  [[nodiscard]] cudaError_t status() const noexcept { return status_; }

 private:
  cudaError_t status_;
};

namespace detail {
/// `file` without the folder the project was built in: "gpumem/mr/pool_memory_resource.hpp",
/// "src/error.cpp" (a file outside include/ and src/: its name alone).
[[nodiscard]] std::string_view source_name(std::string_view file) noexcept;
/// "gpumem failure at file:line: msg" (file as source_name): only for internal logic errors (a
/// broken invariant), where the place in the code is what a bug report needs.
[[nodiscard]] std::string site_message(char const* file, int line, std::string const& msg);
/// "gpumem: msg" — what GPUMEM_EXPECTS, GPUMEM_FAIL and failed CUDA calls say: what was wrong,
/// with the values, and no place in gpumem's sources (nothing a user can act on).
[[nodiscard]] std::string user_message(std::string const& msg);
/// Builds the message of a failed CUDA call: site, call text, error name and string.
[[nodiscard]] std::string cuda_message(char const* file, int line, char const* call, cudaError_t s);
/// Throws the exception that matches `status` (out_of_memory for cudaErrorMemoryAllocation).
[[noreturn]] void throw_cuda_error(char const* file, int line, char const* call,
                                   cudaError_t status);
/// Clears the CUDA error state and throws cuda_error "<context>: <name> (<description>)".
[[noreturn]] void throw_cuda_failure(cudaError_t status, std::string const& context);
}  // namespace detail

}  // namespace gpumem

/// Throws `exception_type` with user_message(msg) when `cond` is false. The message may be any
/// expression convertible to std::string (build it with detail::format or std::to_string).
#define GPUMEM_EXPECTS(cond, exception_type, msg)                                            \
  do {                                                                                       \
    if (!(cond)) [[unlikely]] { throw exception_type{::gpumem::detail::user_message(msg)}; } \
  } while (0)

/// Throws `exception_type` with user_message(msg), unconditionally.
#define GPUMEM_FAIL(exception_type, msg) \
  throw exception_type                   \
  {                                      \
    ::gpumem::detail::user_message(msg)  \
  }

/// Calls a CUDA runtime function and throws cuda_error (or out_of_memory) if it fails.
#define GPUMEM_CUDA_TRY(call)                                                        \
  do {                                                                               \
    cudaError_t const gpumem_status_ = (call);                                       \
    if (gpumem_status_ != cudaSuccess) [[unlikely]] {                                \
      (void)cudaGetLastError();                                                      \
      ::gpumem::detail::throw_cuda_error(__FILE__, __LINE__, #call, gpumem_status_); \
    }                                                                                \
  } while (0)

/// Calls a CUDA runtime function where throwing is not allowed (destructors, deallocate);
/// a failure is cleared and ignored.
#define GPUMEM_CUDA_TRY_NOEXCEPT(call)                       \
  do {                                                       \
    if ((call) != cudaSuccess) { (void)cudaGetLastError(); } \
  } while (0)
