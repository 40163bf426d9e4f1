// Message builders for the GPUMEM_ macros (error.hpp) and the detail/format.hpp helpers.
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>

#include <cstdio>

namespace gpumem::detail {

std::string site_message(char const* file, int line, std::string const& msg)
{
  return format("gpumem failure at ", file, ":", line, ": ", msg);
}

std::string cuda_message(char const* file, int line, char const* call, cudaError_t s)
{
  return site_message(file, line,
                      format(call, " failed: ", cudaGetErrorName(s), " ", cudaGetErrorString(s)));
}

void throw_cuda_error(char const* file, int line, char const* call, cudaError_t status)
{
  auto msg = cuda_message(file, line, call, status);
  if (status == cudaErrorMemoryAllocation) { throw out_of_memory{msg}; }
  throw cuda_error{status, msg};
}

void throw_cuda_failure(cudaError_t status, std::string const& context)
{
  (void)cudaGetLastError();
  throw cuda_error{status, site_message(__FILE__, __LINE__,
                                        format(context, ": ", cudaGetErrorName(status), " (",
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
