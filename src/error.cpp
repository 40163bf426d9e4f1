// Message builders for the GPUMEM_ macros (error.hpp) and the detail/format.hpp helpers.
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/stream_capture.hpp>
#include <gpumem/error.hpp>

#include <cstdio>
#include <string_view>

namespace gpumem::detail {

std::string_view source_name(std::string_view file) noexcept
{
  if (auto const at = file.rfind("/include/"); at != std::string_view::npos) {
    return file.substr(at + std::string_view{"/include/"}.size());
  }
  if (auto const at = file.rfind("/src/"); at != std::string_view::npos) {
    return file.substr(at + 1);
  }
  auto const slash = file.rfind('/');
  return slash == std::string_view::npos ? file : file.substr(slash + 1);
}

std::string site_message(char const* file, int line, std::string const& msg)
{
  return format("gpumem failure at ", source_name(file), ":", line, ": ", msg);
}

std::string user_message(std::string const& msg)
{
  return format("gpumem: ", msg);
}

std::string cuda_message(char const*, int, char const* call, cudaError_t s)
{
  return user_message(format(call, " failed: ", cudaGetErrorName(s), " ", cudaGetErrorString(s)));
}

void throw_cuda_error(char const* file, int line, char const* call, cudaError_t status)
{
  if (is_stream_capture_error(status)) { throw_stream_capture_error(status, call); }
  auto msg = cuda_message(file, line, call, status);
  if (status == cudaErrorMemoryAllocation) { throw out_of_memory{msg}; }
  throw cuda_error{status, msg};
}

void throw_cuda_failure(cudaError_t status, std::string const& context)
{
  (void)cudaGetLastError();
  throw cuda_error{status, user_message(format(context, ": ", cudaGetErrorName(status), " (",
                                               cudaGetErrorString(status), ")"))};
}

std::string bytes_str(std::size_t bytes)
{
  static constexpr char const* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value                         = static_cast<double>(bytes);
  int unit                             = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  char buf[64];
  if (unit == 0) {
    std::snprintf(buf, sizeof buf, "%zu B", bytes);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s (%zu B)", value, units[unit], bytes);
  }
  return buf;
}

std::string ptr_str(void const* ptr)
{
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", ptr);
  return buf;
}

}  // namespace gpumem::detail
