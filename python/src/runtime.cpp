// python/src/runtime.cpp — the CUDA boundary (gpumem::runtime) from Python: the real CUDA
// runtime and the host stand-in (HostRuntime) that lets resources run with no GPU, with streams
// whose progress a test drives by hand.
#include "bindings.hpp"

#include <gpumem/detail/host_runtime.hpp>

namespace gpumem::python {
namespace {

using detail::host_runtime;
using detail::host_runtime_options;

cudaStream_t stream_of(py::handle s)
{
  return to_stream(s).value();
}

py::dict calls_dict(host_runtime const& rt)
{
  auto const c = rt.calls();
  py::dict d;
  d["allocate"]          = c.allocate;
  d["free"]              = c.free;
  d["event_create"]      = c.event_create;
  d["event_record"]      = c.event_record;
  d["event_query"]       = c.event_query;
  d["stream_wait_event"] = c.stream_wait_event;
  d["synchronize"]       = c.synchronize;
  return d;
}

std::shared_ptr<host_runtime> make_host_runtime(std::size_t capacity_bytes, bool backed,
                                                bool auto_complete, std::size_t granularity_bytes,
                                                int device_count)
{
  host_runtime_options o;
  o.capacity_bytes    = capacity_bytes;
  o.backed            = backed;
  o.auto_complete     = auto_complete;
  o.granularity_bytes = granularity_bytes;
  o.device_count      = device_count;
  return std::make_shared<host_runtime>(o);
}

void bind_host_runtime(py::module_& m)
{
  host_runtime_options const defaults{};  // each default written once, in the C++ options
  py::class_<host_runtime, gpumem::runtime, std::shared_ptr<host_runtime>>(m, "HostRuntime", R"doc(
A host stand-in for the CUDA runtime: resources built over it run with no GPU.

Device memory is real host memory (``backed=True``: tests may read and write it through the
pointer) or a simulated address space that touches nothing (``backed=False``: traces larger than
any GPU). ``capacity_bytes`` is enforced: exhaustion raises OutOfMemoryError.

Streams are simulated: each has an *enqueued* and a *completed* position. ``enqueue(s)`` submits
work, ``complete(s)`` finishes it, so "stream A has not yet reached the free" is a state a test
sets, not a race. With ``auto_complete=True`` all work completes at once.
)doc")
      .def(py::init(&make_host_runtime), py::arg("capacity_bytes") = defaults.capacity_bytes,
           py::arg("backed") = defaults.backed, py::arg("auto_complete") = defaults.auto_complete,
           py::arg("granularity_bytes") = defaults.granularity_bytes,
           py::arg("device_count")      = defaults.device_count)
      .def(
          "create_stream", [](host_runtime& rt) { return to_int(rt.create_stream()); },
          "A new simulated stream (an int handle only this runtime understands).")
      .def(
          "enqueue",
          [](host_runtime& rt, py::handle s, std::uint64_t n) { rt.enqueue(stream_of(s), n); },
          py::arg("stream"), py::arg("count") = 1,
          "Submits `count` units of pending work to `stream`.")
      .def(
          "complete", [](host_runtime& rt, py::handle s) { rt.complete(stream_of(s)); },
          py::arg("stream"), "The device finishes the work enqueued on `stream` so far.")
      .def("complete_all", &host_runtime::complete_all, "Completes the work of every stream.")
      .def(
          "enqueued", [](host_runtime& rt, py::handle s) { return rt.enqueued(stream_of(s)); },
          py::arg("stream"))
      .def(
          "completed", [](host_runtime& rt, py::handle s) { return rt.completed(stream_of(s)); },
          py::arg("stream"))
      .def(
          "fail_next_allocations",
          [](host_runtime& rt, std::size_t count) { rt.fail_next_allocations(count); },
          py::arg("count"), "The next `count` leaf allocations fail with OutOfMemoryError.")
      .def_property_readonly("used_bytes", &host_runtime::used_bytes)
      .def_property_readonly("peak_used_bytes", &host_runtime::peak_used_bytes)
      .def_property_readonly("live_allocations", &host_runtime::live_allocations)
      .def_property_readonly("capacity_bytes",
                             [](host_runtime const& rt) { return rt.options().capacity_bytes; })
      .def_property_readonly("backed", [](host_runtime const& rt) { return rt.options().backed; })
      .def("calls", &calls_dict,
           "Counts of runtime calls by kind (allocate, free, event_record, ...).")
      .def("check_invariants", &host_runtime::check_invariants,
           "Raises LogicError naming a broken invariant of the model.");
}

}  // namespace

gpumem::runtime& to_runtime(py::handle runtime)
{
  if (runtime.is_none()) { return gpumem::cuda_device(); }
  return runtime.cast<gpumem::runtime&>();
}

void bind_runtime(py::module_& m)
{
  py::class_<gpumem::runtime, std::shared_ptr<gpumem::runtime>>(m, "Runtime", R"doc(
What gpumem asks of CUDA (memory, events, streams, devices). Two implementations: the real CUDA
runtime (``cuda_runtime()``) and ``HostRuntime``, a host stand-in for tests with no GPU.
)doc")
      .def_property_readonly("name", &gpumem::runtime::name, "'cuda' or 'host'.")
      .def_property_readonly(
          "_handle", [](gpumem::runtime& rt) { return to_int(&rt); },
          "The runtime's address (for gpumem's PyTorch allocator library).")
      .def(
          "memory_info",
          [](gpumem::runtime& rt) {
            auto const info = rt.memory_info();
            return py::make_tuple(info.free_bytes, info.total_bytes);
          },
          "(free_bytes, total_bytes) of the current device.")
      .def("device_count", &gpumem::runtime::device_count)
      .def("current_device", &gpumem::runtime::current_device)
      .def("set_device", &gpumem::runtime::set_device, py::arg("device"),
           "Makes `device` the calling thread's current device.")
      .def("synchronize", &gpumem::runtime::device_synchronize, "Waits for all work of the device.",
           py::call_guard<py::gil_scoped_release>())
      .def(
          "stream_synchronize",
          [](gpumem::runtime& rt, py::handle s) { rt.stream_synchronize(to_stream(s).value()); },
          py::arg("stream"))
      .def(
          "vmm_allocation_at",
          [](gpumem::runtime& rt, std::uintptr_t ptr) {
            auto const info = rt.vmm_allocation_at(to_ptr(ptr));
            py::dict d;
            d["base"]            = to_int(info.base);
            d["bytes"]           = info.bytes;
            d["device"]          = info.device;
            d["shareable"]       = info.properties.shareable;
            d["gpu_direct_rdma"] = info.properties.gpu_direct_rdma;
            return d;
          },
          py::arg("ptr"),
          "The physical allocation mapped at `ptr` (virtual-memory pools): {'base', 'bytes', "
          "'device', 'shareable', 'gpu_direct_rdma'}, as the driver reports it.");
  m.def("cuda_runtime", &detail::cuda_runtime, py::return_value_policy::reference,
        "The process-wide CUDA runtime (the default runtime of every leaf resource).");
  bind_host_runtime(m);
}

cuda_stream_view to_stream(py::handle stream)
{
  if (stream.is_none()) { return cuda_stream_view{}; }
  if (py::isinstance<py::int_>(stream)) {
    return cuda_stream_view{static_cast<cudaStream_t>(to_ptr(stream.cast<std::uintptr_t>()))};
  }
  for (char const* attr : {"ptr", "cuda_stream"}) {
    if (py::hasattr(stream, attr)) { return to_stream(stream.attr(attr)); }
  }
  throw py::type_error(
      "a stream is None, an int (cudaStream_t), or an object with a `ptr` "
      "(CuPy) or `cuda_stream` (PyTorch) attribute; got " +
      py::repr(stream).cast<std::string>());
}

}  // namespace gpumem::python
