// A driver API function looked up through cudart (cudaGetDriverEntryPointByVersion), so that the
// library does not link libcuda and still loads on a machine without a driver. Not API.
#pragma once

#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>

#include <cuda_runtime_api.h>

namespace gpumem::detail {

/// Stores the driver's `symbol` (as of CUDA 12.0) in `fn`. Throws cuda_error naming the symbol and
/// `feature` when the driver does not provide it.
template <class Fn>
void load_driver_symbol(Fn& fn, char const* symbol, char const* feature)
{
  void* ptr{};
  cudaDriverEntryPointQueryResult found{};
  auto const status =
      cudaGetDriverEntryPointByVersion(symbol, &ptr, 12000, cudaEnableDefault, &found);
  if (status != cudaSuccess || found != cudaDriverEntryPointSuccess || ptr == nullptr) {
    (void)cudaGetLastError();
    throw cuda_error{status == cudaSuccess ? cudaErrorNotSupported : status,
                     format(feature, ": the CUDA driver does not provide ", symbol,
                            " (a driver for CUDA 12.0 or newer is needed)")};
  }
  fn = reinterpret_cast<Fn>(ptr);
}

}  // namespace gpumem::detail
