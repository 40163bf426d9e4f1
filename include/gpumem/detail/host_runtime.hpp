// gpumem/detail/host_runtime.hpp — the simulated device's names inside the library (not API): the
// class is public, as gpumem::simulated_device (<gpumem/simulated_device.hpp>, which describes the
// model); the library's own code and tests also spell it detail::host_runtime.
#pragma once

#include <gpumem/detail/runtime.hpp>
#include <gpumem/simulated_device.hpp>

namespace gpumem::detail {

using host_runtime         = gpumem::simulated_device;
using host_runtime_options = gpumem::simulated_device_options;
using host_runtime_calls   = gpumem::simulated_device_calls;
using host_runtime_advice  = gpumem::simulated_device_advice;
using host_vmm_state       = gpumem::simulated_vmm_state;

}  // namespace gpumem::detail
