// python/src/bindings.hpp — shared helpers of the gpumem Python extension (_gpumem).
//
// Ownership model: every resource lives in a std::shared_ptr held by its Python object. A
// resource built over an upstream keeps the upstream's Python object alive (keep_alive), so a
// stack of resources lives as long as its top. The registry, DeviceBuffer and the PyTorch
// allocator keep the Python object of the resource they use alive.
// GIL: allocate/deallocate release it (a resource may call back into Python: callbacks take it).
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/detail/runtime.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/vmm_pause.hpp>

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace gpumem::python {

namespace py = pybind11;

/// The Python holder of every device resource.
template <class T>
using holder = std::shared_ptr<T>;

/// A stream argument: None (default stream), an int (a cudaStream_t), or an object with a
/// `ptr` (CuPy) or `cuda_stream` (PyTorch) attribute. Throws TypeError otherwise.
[[nodiscard]] cuda_stream_view to_stream(py::handle stream);

/// The `offload` argument of pause(): False or None (discard), True or "host" (pinned host
/// memory), "file" (a temporary file). LogicError naming the value otherwise.
[[nodiscard]] pause_mode to_pause_mode(py::handle offload);
/// The `streams` argument of pause(): None (nullopt: the device is synchronized) or an iterable
/// of streams (each as to_stream reads it).
[[nodiscard]] std::optional<std::vector<cuda_stream_view>> to_streams(py::handle streams);

/// The runtime argument of a leaf resource: None means the real CUDA runtime.
[[nodiscard]] gpumem::runtime& to_runtime(py::handle runtime);

/// A pointer as a Python int and back.
[[nodiscard]] inline std::uintptr_t to_int(void const* p)
{
  return reinterpret_cast<std::uintptr_t>(p);
}
[[nodiscard]] inline void* to_ptr(std::uintptr_t p)
{
  return reinterpret_cast<void*>(p);
}

/// The resource behind a Python object (a DeviceMemoryResource); TypeError otherwise.
[[nodiscard]] mr::device_memory_resource& to_resource(py::handle resource);

/// `r`, built over the resource behind `upstream` through a resource ref, linked to it as the C++
/// pointer constructors link: a stack deeper than gpumem::max_stack_depth raises LogicError here
/// instead of overflowing the native stack on the first allocation.
template <class R>
std::shared_ptr<R> linked(py::handle upstream, std::shared_ptr<R> r)
{
  r->link_upstream(&to_resource(upstream));
  return r;
}

// -- one registration function per binding file -------------------------------------------------
void bind_errors(py::module_& m);
void bind_runtime(py::module_& m);
void bind_base(py::module_& m);
void bind_leaf(py::module_& m);
void bind_host(py::module_& m);
void bind_registry(py::module_& m);
void bind_suballocators(py::module_& m);
void bind_adaptors(py::module_& m);
void bind_pools(py::module_& m);
void bind_spec(py::module_& m);
void bind_regions(py::module_& m);
void bind_registrar(py::module_& m);

/// A pause state as Python spells it ("active", "paused_discarded", "paused_offloaded").
inline char const* pause_state_name(pause_state s) noexcept
{
  switch (s) {
    case pause_state::active:
      return "active";
    case pause_state::paused_discarded:
      return "paused_discarded";
    case pause_state::paused_offloaded:
      return "paused_offloaded";
  }
  return "unknown";
}

/// The pause counters of a vmm_pool's statistics (mr::vmm_pool_stats), into `d` (pools and
/// regions report them alike).
template <class Stats>
void put_pause_stats(py::dict& d, Stats const& s)
{
  d["state"]              = pause_state_name(s.state);
  d["paused_bytes"]       = s.paused_bytes;
  d["staging_bytes"]      = s.staging_bytes;
  d["offload_file_bytes"] = s.offload_file_bytes;
  d["pauses"]             = s.pauses;
  d["resumes"]            = s.resumes;
  d["pause_seconds"]      = s.pause_seconds;
  d["resume_seconds"]     = s.resume_seconds;
}

}  // namespace gpumem::python
