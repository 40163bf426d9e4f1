// gpumem/resource_ref.hpp — the six resource-ref aliases over CCCL's cuda::mr, and the checked
// conversion from a resource pointer. The aliases mean the same on every supported CCCL: the
// `_async_` ones are stream-ordered (cuda::mr::async_resource_ref on CCCL 3.0,
// cuda::mr::resource_ref on 3.1 and newer), the others synchronous. detail/cccl_compat.hpp holds
// the version switch.
#pragma once

#include <gpumem/detail/cccl_compat.hpp>
#include <gpumem/error.hpp>

namespace gpumem {

using device_resource_ref       = detail::sync_resource_ref<cuda::mr::device_accessible>;
using device_async_resource_ref = detail::async_resource_ref<cuda::mr::device_accessible>;
using host_resource_ref         = detail::sync_resource_ref<cuda::mr::host_accessible>;
using host_async_resource_ref   = detail::async_resource_ref<cuda::mr::host_accessible>;
using host_device_resource_ref =
    detail::sync_resource_ref<cuda::mr::host_accessible, cuda::mr::device_accessible>;
using host_device_async_resource_ref =
    detail::async_resource_ref<cuda::mr::host_accessible, cuda::mr::device_accessible>;

/// A device_async_resource_ref to `*res`. Throws gpumem::logic_error when `res` is null.
template <class Resource>
device_async_resource_ref to_device_async_resource_ref_checked(Resource* res)
{
  GPUMEM_EXPECTS(res != nullptr, logic_error, "Unexpected null resource pointer.");
  return device_async_resource_ref{*res};
}

}  // namespace gpumem
