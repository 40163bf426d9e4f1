// python/src/host.cpp — host memory resources: new/delete and pinned memory.
#include "bindings.hpp"

#include <gpumem/mr/host_memory_resource.hpp>
#include <gpumem/mr/new_delete_resource.hpp>
#include <gpumem/mr/pinned_memory_resource.hpp>

namespace gpumem::python {

void bind_host(py::module_& m)
{
  using mr::host_memory_resource;
  py::class_<host_memory_resource, holder<host_memory_resource>>(m, "HostMemoryResource", R"doc(
The base of host memory resources: ``allocate(nbytes, alignment)`` returns a host pointer (an int),
``deallocate(ptr, nbytes, alignment)`` frees it.
)doc")
      .def(
          "allocate",
          [](host_memory_resource& r, std::size_t nbytes, std::size_t alignment) {
            return to_int(r.allocate(nbytes, alignment));
          },
          py::arg("nbytes"), py::arg("alignment") = alignof(std::max_align_t))
      .def(
          "deallocate",
          [](host_memory_resource& r, std::uintptr_t p, std::size_t nbytes, std::size_t alignment) {
            r.deallocate(to_ptr(p), nbytes, alignment);
          },
          py::arg("ptr"), py::arg("nbytes"), py::arg("alignment") = alignof(std::max_align_t))
      .def("is_equal", &host_memory_resource::is_equal, py::arg("other"))
      .def("__eq__",
           [](host_memory_resource const& a, host_memory_resource const& b) { return a == b; })
      .def("__hash__",
           [](host_memory_resource const& a) { return py::hash(py::int_(to_int(&a))); });
  py::class_<mr::new_delete_resource, host_memory_resource, holder<mr::new_delete_resource>>(
      m, "NewDeleteResource", "Host memory from the global aligned operator new / delete.")
      .def(py::init<>());
  py::class_<mr::pinned_memory_resource, host_memory_resource, holder<mr::pinned_memory_resource>>(
      m, "PinnedMemoryResource",
      "Pinned (page-locked) host memory from cudaMallocHost; device-accessible too.")
      .def(py::init([](py::handle rt) {
             return std::make_shared<mr::pinned_memory_resource>(to_runtime(rt));
           }),
           py::arg("runtime") = py::none(), py::keep_alive<1, 2>());
}

}  // namespace gpumem::python
