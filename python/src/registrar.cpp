// python/src/registrar.cpp — VmmRegistrar: registrations with NCCL (or any C functions of
// ncclCommRegister's and ncclCommDeregister's signatures) that follow a VmmPoolMemoryResource's
// mappings (C++ gpumem::mr::vmm_registrar). gpumem.torch.nccl_registration builds one.
#include "bindings.hpp"
#include "nccl_registrar.hpp"

#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace gpumem::python {

void bind_registrar(py::module_& m)
{
  using R = mr::vmm_registrar;
  py::class_<R>(m, "VmmRegistrar", R"doc(
Keeps every byte a VmmPoolMemoryResource has mapped registered: what is mapped now at once, then
after each growth or resume, and deregisters what a move, trim or pause unmaps (a pause before its
unmap). ``comm`` is passed to the C functions ``register_fn`` (``int f(void* comm, void* buffer,
size_t bytes, void** handle)``, as ncclCommRegister) and ``deregister_fn`` (``int f(void* comm,
void* handle)``, as ncclCommDeregister), given as addresses; they run without the GIL on the
thread that maps or unmaps, and a non-zero result is counted as a failure (``failures``,
``last_failure``), never raised through the pool. ``unit="handle"`` registers each physical handle
on its own (NCCL before 2.29.2 registers single-handle buffers only); ``"run"`` each run of handles
mapped together (NCCL 2.29.2 and later). ``close()`` (or the end of a ``with`` block) deregisters
everything; use gpumem.torch.nccl_registration to build one for a process group.
)doc")
      .def(py::init([](mr::vmm_pool_memory_resource& pool, std::uintptr_t comm, std::uintptr_t reg,
                       std::uintptr_t dereg, std::string const& unit) {
             return make_nccl_registrar(pool, to_ptr(comm), reinterpret_cast<nccl_register_fn>(reg),
                                        reinterpret_cast<nccl_deregister_fn>(dereg),
                                        registration_unit(unit));
           }),
           py::arg("pool"), py::arg("comm"), py::arg("register_fn"), py::arg("deregister_fn"),
           py::arg("unit") = "handle", py::keep_alive<1, 2>())
      .def("close", &R::close, py::call_guard<py::gil_scoped_release>(),
           "Stops following the pool and deregisters everything (again: nothing).")
      .def_property_readonly("closed", &R::closed)
      .def_property_readonly("unit",
                             [](R const& r) {
                               return r.unit() == mr::vmm_registration_unit::handle ? "handle"
                                                                                    : "run";
                             })
      .def(
          "registrations",
          [](R const& r) {
            std::vector<std::pair<std::uintptr_t, std::size_t>> out;
            {
              py::gil_scoped_release nogil;
              for (auto const& x : r.registrations()) { out.emplace_back(to_int(x.ptr), x.bytes); }
            }
            return out;
          },
          "The registered ranges now, as (address, bytes) in address order.")
      .def_property_readonly(
          "registered_bytes",
          [](R const& r) {
            py::gil_scoped_release nogil;
            std::size_t bytes = 0;
            for (auto const& x : r.registrations()) { bytes += x.bytes; }
            return bytes;
          },
          "The bytes registered now (the sum over registrations()).")
      .def_property_readonly("registered", &R::registered, "Successful register calls so far.")
      .def_property_readonly("deregistered", &R::deregistered,
                             "Successful deregister calls so far.")
      .def_property_readonly("failures", &R::failures, "Calls that failed so far.")
      .def_property_readonly("last_failure", &R::last_failure,
                             "What the last failing call reported ('' when none failed).")
      .def(
          "__enter__", [](R& r) -> R& { return r; }, py::return_value_policy::reference)
      .def("__exit__", [](R& r, py::args) {
        py::gil_scoped_release nogil;
        r.close();
        return false;
      });
}

}  // namespace gpumem::python
