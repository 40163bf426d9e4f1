// python/src/regions.cpp — VmmRegionMemoryResource: one virtual-memory pool per region name, a
// `with resource.region("kv_cache"):` scope for this thread's allocations, pause / resume of one
// region or all (docs/sleep.md). gpumem.region / pause / resume (python/gpumem/__init__.py) use
// the current device resource.
#include "bindings.hpp"

#include <pybind11/stl.h>

#include <gpumem/mr/vmm_region_resource.hpp>

#include <memory>
#include <optional>
#include <string>

namespace gpumem::python {
namespace {

using R = mr::vmm_region_resource;

/// A Python context manager over region_scope: entered and exited on one thread.
struct region_context {
  region_context(R* r, std::string t) : resource{r}, tag{std::move(t)} {}
  R* resource;
  std::string tag;
  std::optional<mr::region_scope> scope;
};

}  // namespace

void bind_regions(py::module_& m)
{
  py::class_<region_context>(m, "RegionScope", R"doc(
``with resource.region(tag):`` — this thread's allocations from the resource go to region ``tag``
until the block ends (scopes nest; other threads are not affected).
)doc")
      .def_property_readonly("tag", [](region_context const& c) { return c.tag; })
      .def(
          "__enter__",
          [](region_context& c) -> region_context& {
            GPUMEM_EXPECTS(!c.scope, logic_error,
                           "gpumem: region scope '" + c.tag + "' entered twice");
            c.scope.emplace(*c.resource, c.tag);
            return c;
          },
          py::return_value_policy::reference)
      .def("__exit__", [](region_context& c, py::args) {
        c.scope.reset();
        return false;
      });

  py::class_<R, mr::device_memory_resource, holder<R>> c(m, "VmmRegionMemoryResource", R"doc(
Allocations routed by region (C++ ``gpumem::mr::vmm_region_resource``): one VmmPoolMemoryResource
per region name, each with its own address range and physical memory, so that each region can be
paused (its memory given back, contents discarded or offloaded to host memory or a file) and resumed at the
same addresses on its own. ``with resource.region("kv_cache"):`` routes this thread's allocations;
outside any region they go to region "default". Frees find their region by address.

Every region's pool gets ``reserve_bytes`` (None: twice the device memory) of address space,
physical handles of ``handle_bytes`` (None: 256 MiB; up to twice that between the ends of one
growth; pause and resume cost the driver's calls
once per handle, so larger handles sleep and wake faster, smaller ones give memory back in finer
steps), ``keep_offload_staging`` (keep the pinned host copy of an offloaded region after resume
for the next offload: pinning costs as much time as the copy) and ``offload_directory`` (where
``pause(offload="file")`` writes; None: ``TMPDIR``, else /tmp).
)doc");
  auto const defaults = R::default_options();
  c.def(py::init([](std::optional<std::size_t> reserve, std::optional<std::size_t> handle,
                    std::optional<int> device, py::handle runtime, bool keep_staging,
                    std::optional<std::string> directory) {
          auto o                 = R::default_options();
          o.reserve_bytes        = reserve.value_or(0);
          o.handle_bytes         = handle.value_or(o.handle_bytes);
          o.device               = device.value_or(-1);
          o.keep_offload_staging = keep_staging;
          o.offload_directory    = directory.value_or("");
          return std::make_shared<R>(o, to_runtime(runtime));
        }),
        py::kw_only(), py::arg("reserve_bytes") = py::none(), py::arg("handle_bytes") = py::none(),
        py::arg("device") = py::none(), py::arg("runtime") = py::none(),
        py::arg("keep_offload_staging") = defaults.keep_offload_staging,
        py::arg("offload_directory")    = py::none(), py::keep_alive<1, 5>())
      .def(
          "region",
          [](R& r, std::string tag) {
            GPUMEM_EXPECTS(!tag.empty(), logic_error, "gpumem: a region name must not be empty");
            return std::make_unique<region_context>(&r, std::move(tag));
          },
          py::arg("tag"), py::keep_alive<0, 1>(),
          "A context manager: this thread's allocations from this resource go to region `tag`.")
      .def("regions", &R::regions, "The region names so far, sorted.")
      .def_property_readonly("current_region", &R::current_region,
                             "The region this thread's allocations go to now.")
      .def(
          "pause",
          [](R& r, std::optional<std::string> tag, py::object offload,
             py::object streams) -> std::size_t {
            auto const mode  = to_pause_mode(offload);
            auto const named = to_streams(streams);
            py::gil_scoped_release nogil;
            if (named) {
              return tag ? (r.pause(*tag, mode, *named) ? 1 : 0) : r.pause_all(mode, *named);
            }
            return tag ? (r.pause(*tag, mode) ? 1 : 0) : r.pause_all(mode);
          },
          py::arg("tag") = py::none(), py::kw_only(), py::arg("offload") = false,
          py::arg("streams") = py::none(),
          "Pauses region `tag` (None: every region): its physical memory goes back to the device, "
          "its addresses stay. offload=True keeps the contents in pinned host memory, "
          "offload=\"file\" in a temporary file in offload_directory (through at most 128 MiB of "
          "pinned memory). Waits for the whole device first, or, given `streams` (streams or "
          "cudaStream_t ints), for those streams only. Returns how many regions this call paused.")
      .def(
          "resume",
          [](R& r, std::optional<std::string> tag) -> std::size_t {
            py::gil_scoped_release nogil;
            return tag ? (r.resume(*tag) ? 1 : 0) : r.resume_all();
          },
          py::arg("tag") = py::none(),
          "Resumes region `tag` (None: every region) at the same addresses. Returns how many "
          "regions this call resumed.")
      .def(
          "state", [](R& r, std::string const& tag) { return pause_state_name(r.state(tag)); },
          py::arg("tag"), "'active', 'paused_discarded' or 'paused_offloaded'.")
      .def(
          "stats",
          [](R& r, std::string const& tag) {
            auto const s = r.stats(tag);
            py::dict d;
            d["mapped_bytes"] = s.mapped_bytes;
            d["free_bytes"]   = s.free_bytes;
            put_pause_stats(d, s);
            return d;
          },
          py::arg("tag"),
          "{'state', 'mapped_bytes', 'paused_bytes', 'free_bytes', 'staging_bytes', "
          "'offload_file_bytes', 'pauses', 'resumes', 'pause_seconds', 'resume_seconds'} of "
          "region `tag`.")
      .def_property_readonly("bad_deallocations", &R::bad_deallocations,
                             "Deallocations of pointers no region handed out.")
      .def("check_invariants", &R::check_invariants,
           "Raises LogicError naming the first broken invariant of any region.");
}

}  // namespace gpumem::python
