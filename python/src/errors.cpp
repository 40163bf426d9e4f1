// python/src/errors.cpp — gpumem's C++ exceptions as Python exception types.
//   gpumem::bad_alloc      -> gpumem.BadAlloc (MemoryError)
//   gpumem::out_of_memory  -> gpumem.OutOfMemoryError (BadAlloc, so also MemoryError)
//   gpumem::logic_error    -> gpumem.LogicError (ValueError)
//   gpumem::cuda_error     -> gpumem.CudaError (RuntimeError)
// The Python message is the C++ what(): the request, the free memory, the resource.
#include "bindings.hpp"

#include <gpumem/error.hpp>

namespace gpumem::python {

void bind_errors(py::module_& m)
{
  // pybind11 tries the most recently registered translator first: register bases first.
  auto const& bad_alloc_type =
      py::register_exception<gpumem::bad_alloc>(m, "BadAlloc", PyExc_MemoryError);
  py::register_exception<gpumem::out_of_memory>(m, "OutOfMemoryError", bad_alloc_type);
  py::register_exception<gpumem::logic_error>(m, "LogicError", PyExc_ValueError);
  py::register_exception<gpumem::cuda_error>(m, "CudaError", PyExc_RuntimeError);
  m.attr("BadAlloc").attr("__doc__") =
      "An allocation could not be satisfied (gpumem::bad_alloc). Subclass of MemoryError.";
  m.attr("OutOfMemoryError").attr("__doc__") =
      "Memory is exhausted (gpumem::out_of_memory). The message says how much was asked, how much "
      "is free and how fragmented the resource is. Subclass of BadAlloc and MemoryError.";
  m.attr("LogicError").attr("__doc__") =
      "Misuse of the API: bad argument or alignment, foreign or double free (gpumem::logic_error).";
  m.attr("CudaError").attr("__doc__") = "A CUDA runtime call failed (gpumem::cuda_error).";
}

}  // namespace gpumem::python
