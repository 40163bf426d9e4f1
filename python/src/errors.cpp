// python/src/errors.cpp — gpumem's C++ exceptions as Python exception types.
//   gpumem::bad_alloc      -> gpumem.BadAlloc (MemoryError)
//   gpumem::out_of_memory  -> gpumem.OutOfMemoryError (BadAlloc, so also MemoryError)
//   gpumem::logic_error    -> gpumem.LogicError (ValueError)
//   gpumem::cuda_error     -> gpumem.CudaError (RuntimeError)
//   gpumem::offload_file_error -> gpumem.OffloadFileError (OSError)
// The Python message is the C++ what(): the request, the free memory, the resource. A CUDA error
// that means "no GPU here" also says how to run without one.
#include "bindings.hpp"

#include <gpumem/mr/vmm_pause.hpp>

#include <gpumem/error.hpp>

#include <exception>
#include <string>

namespace gpumem::python {
namespace {

PyObject* cuda_error_type = nullptr;  // gpumem.CudaError, set once by bind_errors

/// The message of `e`, plus what to do when the error means that no usable GPU is there.
std::string with_no_gpu_hint(gpumem::cuda_error const& e)
{
  std::string msg = e.what();
  auto const s    = e.status();
  if (s == cudaErrorNoDevice || s == cudaErrorInsufficientDriver ||
      s == cudaErrorInitializationError) {
    msg +=
        " -- no usable CUDA GPU here: to run without one, pass runtime=gpumem.HostRuntime() "
        "(a simulated device) to the leaf resource, e.g. "
        "gpumem.CudaMemoryResource(gpumem.HostRuntime())";
  }
  return msg;
}

}  // namespace

void bind_errors(py::module_& m)
{
  // pybind11 tries the most recently registered translator first: register bases first.
  auto const& bad_alloc_type =
      py::register_exception<gpumem::bad_alloc>(m, "BadAlloc", PyExc_MemoryError);
  py::register_exception<gpumem::out_of_memory>(m, "OutOfMemoryError", bad_alloc_type);
  auto const& logic_error_type =
      py::register_exception<gpumem::logic_error>(m, "LogicError", PyExc_ValueError);
  py::register_exception<gpumem::paused_error>(m, "PausedError", logic_error_type);
  py::register_exception<gpumem::offload_file_error>(m, "OffloadFileError", PyExc_OSError);
  cuda_error_type =
      py::register_exception<gpumem::cuda_error>(m, "CudaError", PyExc_RuntimeError).ptr();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) { std::rethrow_exception(p); }
    } catch (gpumem::cuda_error const& e) {
      PyErr_SetString(cuda_error_type, with_no_gpu_hint(e).c_str());
    }
  });
  m.attr("BadAlloc").attr("__doc__") =
      "An allocation could not be satisfied (gpumem::bad_alloc). Subclass of MemoryError.";
  m.attr("OutOfMemoryError").attr("__doc__") =
      "Memory is exhausted (gpumem::out_of_memory). The message says how much was asked, how much "
      "is free and how fragmented the resource is. Subclass of BadAlloc and MemoryError.";
  m.attr("LogicError").attr("__doc__") =
      "Misuse of the API: bad argument or alignment, foreign or double free (gpumem::logic_error).";
  m.attr("CudaError").attr("__doc__") = "A CUDA runtime call failed (gpumem::cuda_error).";
  m.attr("OffloadFileError").attr("__doc__") =
      "The file of pause(offload=\"file\") could not be created, written or read back "
      "(gpumem::offload_file_error): a missing directory, a full disk. The message names the "
      "directory and the size; the pool or region is left as before the call. Subclass of "
      "OSError.";
  m.attr("PausedError").attr("__doc__") =
      "An allocation from a paused pool or region (gpumem::paused_error): resume() it first. "
      "Subclass of LogicError.";
}

}  // namespace gpumem::python
