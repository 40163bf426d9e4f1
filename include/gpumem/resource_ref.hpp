// gpumem/resource_ref.hpp — the six resource-ref aliases over CCCL's cuda::mr, and the checked
// conversion from a resource pointer.
#pragma once

#ifndef LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#endif
#include <cuda/memory_resource>

#include <gpumem/error.hpp>

namespace gpumem {

using device_resource_ref       = cuda::mr::resource_ref<cuda::mr::device_accessible>;
using device_async_resource_ref = cuda::mr::async_resource_ref<cuda::mr::device_accessible>;
using host_resource_ref         = cuda::mr::resource_ref<cuda::mr::host_accessible>;
using host_async_resource_ref   = cuda::mr::async_resource_ref<cuda::mr::host_accessible>;
using host_device_resource_ref =
    cuda::mr::resource_ref<cuda::mr::host_accessible, cuda::mr::device_accessible>;
using host_device_async_resource_ref =
    cuda::mr::async_resource_ref<cuda::mr::host_accessible, cuda::mr::device_accessible>;

/// A device_async_resource_ref to `*res`. Throws gpumem::logic_error when `res` is null.
template <class Resource>
device_async_resource_ref to_device_async_resource_ref_checked(Resource* res)
{
  GPUMEM_EXPECTS(res != nullptr, logic_error, "Unexpected null resource pointer.");
  return device_async_resource_ref{*res};
}

}  // namespace gpumem
