// python/src/leaf.cpp — leaf device resources: memory straight from the runtime.
#include "bindings.hpp"
#include "byte_size.hpp"

#include <gpumem/mr/callback_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/mr/sam_headroom_memory_resource.hpp>
#include <gpumem/mr/system_memory_resource.hpp>

#include <pybind11/functional.h>

namespace gpumem::python {
namespace {

using mr::device_memory_resource;

template <class R>
using leaf_class = py::class_<R, device_memory_resource, holder<R>>;

/// A Python allocate callback as the C++ one: called with the GIL, returns the pointer.
mr::allocate_callback_t allocate_callback(py::function f)
{
  auto fn = std::make_shared<py::function>(std::move(f));
  return [fn](std::size_t bytes, cuda_stream_view stream, void*) -> void* {
    py::gil_scoped_acquire gil;
    return to_ptr((*fn)(bytes, to_int(stream.value())).cast<std::uintptr_t>());
  };
}

/// A Python deallocate callback as the C++ one; an exception it raises is reported as
/// unraisable (deallocate never throws).
mr::deallocate_callback_t deallocate_callback(py::function f)
{
  auto fn = std::make_shared<py::function>(std::move(f));
  return [fn](void* ptr, std::size_t bytes, cuda_stream_view stream, void*) {
    py::gil_scoped_acquire gil;
    try {
      (*fn)(to_int(ptr), bytes, to_int(stream.value()));
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("gpumem.CallbackMemoryResource deallocate callback");
    }
  };
}

void bind_callback(py::module_& m)
{
  leaf_class<mr::callback_memory_resource>(m, "CallbackMemoryResource", R"doc(
A resource whose allocate and deallocate are Python functions:
``allocate(nbytes, stream) -> ptr`` and ``deallocate(ptr, nbytes, stream)`` (stream as an int).
They are called with the GIL held, possibly from other threads. An exception raised by allocate
propagates to the caller; one raised by deallocate is reported as unraisable.
)doc")
      .def(py::init([](py::function allocate, py::function deallocate) {
             // The callbacks hold Python objects: destroy them with the GIL (the wrapper is
             // destroyed from Python, which holds it).
             return std::make_shared<mr::callback_memory_resource>(allocate_callback(allocate),
                                                                   deallocate_callback(deallocate));
           }),
           py::arg("allocate"), py::arg("deallocate"));
}

}  // namespace

void bind_leaf(py::module_& m)
{
  leaf_class<mr::cuda_memory_resource>(m, "CudaMemoryResource", R"doc(
Device memory straight from cudaMalloc / cudaFree (every call reaches the runtime, and freeing
synchronizes like cudaFree). ``runtime=None`` is the real CUDA runtime; pass a HostRuntime to run
with no GPU.
)doc")
      .def(py::init([](py::handle rt) {
             return std::make_shared<mr::cuda_memory_resource>(to_runtime(rt));
           }),
           py::arg("runtime") = py::none(), py::keep_alive<1, 2>());
  leaf_class<mr::managed_memory_resource>(m, "ManagedMemoryResource", R"doc(
Unified (managed) memory from cudaMallocManaged, usable from host and device. Never ask for more
than the GPU has free.
)doc")
      .def(py::init([](py::handle rt) {
             return std::make_shared<mr::managed_memory_resource>(to_runtime(rt));
           }),
           py::arg("runtime") = py::none(), py::keep_alive<1, 2>());
  leaf_class<mr::system_memory_resource>(m, "SystemMemoryResource", R"doc(
System-allocated (malloc) memory that the GPU reaches through HMM or ATS. Raises LogicError when the
current device cannot access pageable memory. Deallocation synchronizes the stream first.
)doc")
      .def(py::init([](py::handle rt) {
             return std::make_shared<mr::system_memory_resource>(to_runtime(rt));
           }),
           py::arg("runtime") = py::none(), py::keep_alive<1, 2>());
  leaf_class<mr::sam_headroom_memory_resource>(m, "SamHeadroomMemoryResource", R"doc(
System memory that keeps ``headroom`` bytes of the GPU free: the part of each allocation that fits
in free GPU memory minus the headroom prefers the GPU, the rest prefers the host.
)doc")
      .def(py::init([](byte_size headroom, py::handle rt) {
             return std::make_shared<mr::sam_headroom_memory_resource>(headroom, to_runtime(rt));
           }),
           py::arg("headroom"), py::arg("runtime") = py::none(), py::keep_alive<1, 3>())
      .def_property_readonly("headroom", &mr::sam_headroom_memory_resource::get_headroom);
  bind_callback(m);
}

}  // namespace gpumem::python
