// python/src/registry.cpp — the per-device resource registry (C++ side). The Python functions in
// gpumem/__init__.py wrap these and keep the Python objects of the resources they set alive.
#include "bindings.hpp"

#include <gpumem/mr/per_device_resource.hpp>

namespace gpumem::python {

void bind_registry(py::module_& m)
{
  using mr::device_memory_resource;
  auto const ref     = py::return_value_policy::reference;
  auto const or_null = [](py::handle r) -> device_memory_resource* {
    return r.is_none() ? nullptr : &to_resource(r);
  };
  m.def(
      "_get_per_device_resource",
      [](int device) { return mr::get_per_device_resource(cuda_device_id{device}); }, ref);
  m.def(
      "_initial_device_resource",
      [] {
        // The initial resource: what the registry holds for a device it has never been given.
        return mr::get_per_device_resource(cuda_device_id{-1});
      },
      ref);
  m.def("_set_per_device_resource", [or_null](int device, py::handle r) {
    mr::set_per_device_resource(cuda_device_id{device}, or_null(r));
  });
  m.def("_set_per_device_resource_ref", [](int device, py::handle r) {
    mr::set_per_device_resource_ref(cuda_device_id{device},
                                    device_async_resource_ref{to_resource(r)});
  });
  m.def("_reset_per_device_resource_ref",
        [](int device) { mr::reset_per_device_resource_ref(cuda_device_id{device}); });
  m.def(
      "get_current_device", [] { return get_current_cuda_device().value(); },
      "The calling thread's current CUDA device (0 with no GPU).");
  m.def("get_num_devices", &get_num_cuda_devices,
        "Number of visible CUDA devices (0 with no GPU).");
}

}  // namespace gpumem::python
