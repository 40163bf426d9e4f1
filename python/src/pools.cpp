// python/src/pools.cpp — CUDA memory pools (seeds 002 and 004): properties and their rules
// (checked without CUDA, so CI exercises them), capabilities, MemoryPoolRef / MemoryPool with the
// typed attributes as properties, access, trim_to, the default and current pool of a device, and
// the resources over CUDA's stream-ordered allocator (CudaAsyncMemoryResource and its view).
#include "bindings.hpp"

#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/cuda_async_view_memory_resource.hpp>
#include <gpumem/pool/device_pools.hpp>
#include <gpumem/pool/memory_pool.hpp>
#include <gpumem/pool/pool_capabilities.hpp>
#include <gpumem/pool/pool_properties.hpp>
#include <gpumem/ipc/vmm_ipc.hpp>

#include <pybind11/stl.h>

#include <limits>
#include <string>

namespace gpumem::python {
namespace {

namespace attr = pool_attr;

void bind_enums(py::module_& m)
{
  py::enum_<location_kind>(m, "LocationKind", "Where a pool's memory lives.")
      .value("none", location_kind::none)
      .value("device", location_kind::device)
      .value("host", location_kind::host)
      .value("host_numa", location_kind::host_numa);
  py::enum_<pool_allocation_type>(m, "PoolAllocationType", "What kind of memory a pool hands out.")
      .value("pinned", pool_allocation_type::pinned)
      .value("managed", pool_allocation_type::managed);
  py::enum_<allocation_handle_type>(m, "AllocationHandleType", py::arithmetic(),
                                    "How a pool may be exported to another process.")
      .value("none", allocation_handle_type::none)
      .value("posix_file_descriptor", allocation_handle_type::posix_file_descriptor)
      .value("win32", allocation_handle_type::win32)
      .value("win32_kmt", allocation_handle_type::win32_kmt)
      .value("fabric", allocation_handle_type::fabric);
  py::enum_<access_flags>(m, "AccessFlags", "Access of a device to a pool's memory.")
      .value("none", access_flags::none)
      .value("read", access_flags::read)
      .value("read_write", access_flags::read_write);
}

pool_properties make_properties(location_kind kind, int id, pool_allocation_type type,
                                std::vector<allocation_handle_type> const& handles,
                                std::size_t max_size_bytes, unsigned short usage)
{
  unsigned bits = 0;
  for (auto h : handles) { bits |= static_cast<unsigned>(h); }
  return pool_properties{pool_location{kind, id}, type, handle_type_set::from_bits(bits),
                         max_size_bytes, usage};
}

std::vector<allocation_handle_type> handle_list(handle_type_set set)
{
  std::vector<allocation_handle_type> out;
  for (auto t : {allocation_handle_type::posix_file_descriptor, allocation_handle_type::win32,
                 allocation_handle_type::win32_kmt, allocation_handle_type::fabric}) {
    if (set.contains(t)) { out.push_back(t); }
  }
  return out;
}

void bind_properties(py::module_& m)
{
  py::class_<pool_properties>(m, "PoolProperties", R"doc(
What a MemoryPool is created from: ``location`` (LocationKind) and ``id`` (device ordinal or NUMA
node), ``allocation_type`` (pinned or managed), ``handle_types`` (IPC export types; empty: not
IPC-capable), ``max_size_bytes`` (0: no limit) and ``usage`` bits. ``broken_rule()`` names the
first rule (R1..R9) the combination breaks, without calling CUDA.
)doc")
      .def(py::init(&make_properties), py::arg("location") = location_kind::device,
           py::arg("id") = 0, py::arg("allocation_type") = pool_allocation_type::pinned,
           py::arg("handle_types")   = std::vector<allocation_handle_type>{},
           py::arg("max_size_bytes") = 0, py::arg("usage") = 0)
      .def_property_readonly("location", [](pool_properties const& p) { return p.location.kind; })
      .def_property_readonly("id", [](pool_properties const& p) { return p.location.id; })
      .def_readwrite("allocation_type", &pool_properties::allocation_type)
      .def_property_readonly("handle_types",
                             [](pool_properties const& p) { return handle_list(p.handle_types); })
      .def_readwrite("max_size_bytes", &pool_properties::max_size_bytes)
      .def_readwrite("usage", &pool_properties::usage)
      .def(
          "broken_rule", [](pool_properties const& p) { return find_broken_rule(p); },
          "The first rule broken, as a sentence; '' when valid.")
      .def(
          "validate", [](pool_properties const& p) { validate(p); },
          "Raises LogicError naming the broken rule.")
      .def("__repr__",
           [](pool_properties const& p) { return "PoolProperties(" + to_string(p) + ")"; });
}

py::dict capabilities(int device)
{
  auto const c = query_pool_capabilities(cuda_device_id{device});
  py::dict d;
  d["device"]                        = c.device;
  d["device_count"]                  = c.device_count;
  d["driver_version"]                = c.driver_version;
  d["runtime_version"]               = c.runtime_version;
  d["pools_supported"]               = c.pools_supported;
  d["supported_handle_types"]        = handle_list(c.supported_handle_types);
  d["host_pools_supported"]          = c.host_pools_supported;
  d["host_numa_pools_supported"]     = c.host_numa_pools_supported;
  d["concurrent_managed_access_all"] = c.concurrent_managed_access_all;
  d["fabric_unavailable_reason"]     = c.fabric_unavailable_reason;
  d["device_unusable_reason"]        = c.device_unusable_reason;
  return d;
}

template <class A, class Class>
void def_attribute(Class& c, char const* name, char const* doc)
{
  if constexpr (A::writable) {
    c.def_property(
        name, [](memory_pool_ref const& p) { return p.get<A>(); },
        [](memory_pool_ref const& p, typename A::value_type v) { p.set<A>(v); }, doc);
  } else {
    c.def_property_readonly(
        name, [](memory_pool_ref const& p) { return p.get<A>(); }, doc);
  }
}

void bind_pool_ref(py::module_& m)
{
  py::class_<memory_pool_ref, std::shared_ptr<memory_pool_ref>> c(m, "MemoryPoolRef", R"doc(
A non-owning reference to a CUDA memory pool (one this process created, or a device's default or
current pool). Attributes are properties: ``release_threshold`` and the three ``reuse_*`` policies
are writable; ``reserved_mem_current``, ``reserved_mem_high``, ``used_mem_current`` and
``used_mem_high`` are read-only (the high-water marks reset with ``reset_high_water_marks()``).
)doc");
  def_attribute<attr::release_threshold>(c, "release_threshold",
                                         "Bytes kept reserved at a synchronization.");
  def_attribute<attr::reuse_follow_event_dependencies>(c, "reuse_follow_event_dependencies", "");
  def_attribute<attr::reuse_allow_opportunistic>(c, "reuse_allow_opportunistic", "");
  def_attribute<attr::reuse_allow_internal_dependencies>(c, "reuse_allow_internal_dependencies",
                                                         "");
  def_attribute<attr::reserved_mem_current>(c, "reserved_mem_current", "Bytes reserved now.");
  def_attribute<attr::reserved_mem_high>(c, "reserved_mem_high",
                                         "High-water mark of reserved bytes.");
  def_attribute<attr::used_mem_current>(c, "used_mem_current", "Bytes in use now.");
  def_attribute<attr::used_mem_high>(c, "used_mem_high", "High-water mark of used bytes.");
  c.def_property_readonly("handle", [](memory_pool_ref const& p) { return to_int(p.handle()); })
      .def("usage_statistics",
           [](memory_pool_ref const& p) {
             auto const s = p.usage_statistics();
             py::dict d;
             d["reserved_bytes"]      = s.reserved_bytes;
             d["reserved_high_bytes"] = s.reserved_high_bytes;
             d["used_bytes"]          = s.used_bytes;
             d["used_high_bytes"]     = s.used_high_bytes;
             return d;
           })
      .def("reset_high_water_marks", &memory_pool_ref::reset_high_water_marks)
      .def("trim_to", &memory_pool_ref::trim_to, py::arg("min_bytes_to_keep"),
           "Releases memory to the OS until fewer than `min_bytes_to_keep` bytes are reserved.")
      .def(
          "set_access",
          [](memory_pool_ref const& p, int device, access_flags f) {
            p.set_access(cuda_device_id{device}, f);
          },
          py::arg("device"), py::arg("flags") = access_flags::read_write)
      .def(
          "access",
          [](memory_pool_ref const& p, int device) { return p.access(cuda_device_id{device}); },
          py::arg("device"))
      .def(
          "allocate",
          [](memory_pool_ref const& p, std::size_t n, py::handle s) {
            return to_int(p.allocate(n, to_stream(s)));
          },
          py::arg("nbytes"), py::arg("stream") = py::none(),
          "cudaMallocFromPoolAsync; returns the pointer.")
      .def(
          "deallocate",
          [](memory_pool_ref const& p, std::uintptr_t ptr, py::handle s) {
            p.deallocate(to_ptr(ptr), to_stream(s));
          },
          py::arg("ptr"), py::arg("stream") = py::none(), "cudaFreeAsync.")
      .def("__eq__", [](memory_pool_ref a, memory_pool_ref b) { return a == b; });
}

void bind_pool(py::module_& m)
{
  py::class_<memory_pool, memory_pool_ref, std::shared_ptr<memory_pool>>(m, "MemoryPool", R"doc(
An owning CUDA memory pool created from PoolProperties (or the same keyword arguments). The
properties are checked first (LogicError naming the rule), then the device's capabilities
(CudaError saying what is unsupported), then cudaMemPoolCreate. Destroyed with the object.
)doc")
      .def(py::init(
               [](pool_properties const& props) { return std::make_shared<memory_pool>(props); }),
           py::arg("properties"))
      .def_property_readonly("properties", &memory_pool::properties)
      .def("ref", &memory_pool::ref);
  m.def("query_pool_capabilities", &capabilities, py::arg("device") = 0,
        "What the device and driver support (never raises without a GPU: see "
        "'device_unusable_reason').");
  m.def(
      "default_pool", [](int d) { return default_pool(cuda_device_id{d}); }, py::arg("device") = 0);
  m.def(
      "current_pool", [](int d) { return current_pool(cuda_device_id{d}); }, py::arg("device") = 0);
  m.def(
      "set_current_pool", [](int d, memory_pool_ref p) { set_current_pool(cuda_device_id{d}, p); },
      py::arg("device"), py::arg("pool"), "Keep the pool alive while it is current.");
}

void bind_cuda_async(py::module_& m)
{
  using mr::device_memory_resource;
  using R = mr::cuda_async_memory_resource;
  py::class_<R, device_memory_resource, holder<R>>(m, "CudaAsyncMemoryResource", R"doc(
Device memory from CUDA's stream-ordered allocator (cudaMallocFromPoolAsync / cudaFreeAsync)
over a pool this resource owns, on the current device. ``initial_pool_size`` (default: half of
free memory) is reserved up front; ``release_threshold`` (default: total device memory) is what
the pool keeps at a synchronization; ``export_handle_type`` makes it IPC-capable. ``pool`` gives
the pool's attributes and statistics.
)doc")
      .def(py::init([](std::optional<std::size_t> initial, std::optional<std::size_t> threshold,
                       std::optional<allocation_handle_type> handle) {
             return std::make_shared<R>(initial, threshold, handle);
           }),
           py::arg("initial_pool_size") = py::none(), py::arg("release_threshold") = py::none(),
           py::arg("export_handle_type") = py::none())
      .def_property_readonly("pool_handle", [](R const& r) { return to_int(r.pool_handle()); })
      .def_property_readonly(
          "pool",
          py::cpp_function([](R const& r) { return r.pool().ref(); }, py::keep_alive<0, 1>()),
          "The pool (a MemoryPoolRef, valid while this resource lives).");
  using V = mr::cuda_async_view_memory_resource;
  py::class_<V, device_memory_resource, holder<V>>(m, "CudaAsyncViewMemoryResource", R"doc(
Stream-ordered allocation from an existing pool it does not own (a MemoryPoolRef, e.g.
``default_pool(0)``, or a raw cudaMemPool_t as an int). The pool must outlive it.
)doc")
      .def(py::init([](py::handle pool) {
             if (py::isinstance<memory_pool_ref>(pool)) {
               return std::make_shared<V>(pool.cast<memory_pool_ref>());
             }
             if (!PyLong_Check(pool.ptr()) || PyBool_Check(pool.ptr()) ||
                 py::reinterpret_borrow<py::int_>(pool) < py::int_(0) ||
                 py::reinterpret_borrow<py::int_>(pool) >
                     py::int_(std::numeric_limits<std::uintptr_t>::max())) {
               throw py::type_error(
                   "CudaAsyncViewMemoryResource: pool must be a MemoryPoolRef or a cudaMemPool_t "
                   "as an int from 0 to 2^64 - 1, got " +
                   std::string(py::repr(pool)));
             }
             return std::make_shared<V>(
                 static_cast<cudaMemPool_t>(to_ptr(pool.cast<std::uintptr_t>())));
           }),
           py::arg("pool"), py::keep_alive<1, 2>())
      .def_property_readonly("pool_handle", [](V const& r) { return to_int(r.pool_handle()); });
}

}  // namespace

/// An imported single-handle allocation that Python can unmap early (close, or a with block).
struct imported_vmm {
  std::optional<imported_vmm_memory> memory;
  [[nodiscard]] imported_vmm_memory const& get() const
  {
    GPUMEM_EXPECTS(memory.has_value(), logic_error, "the imported memory was closed");
    return *memory;
  }
};

void bind_imported_vmm(py::module_& m)
{
  py::class_<imported_vmm>(m, "ImportedVmmMemory", R"doc(
Another process's single-handle allocation (VmmPoolMemoryResource.export_single_handle), mapped
here with read-write access for ``device`` (None: the current device). ``fd`` stays yours to
close. ``close()`` (or the end of a ``with`` block) unmaps it; the memory itself is freed when
every process has unmapped it.
)doc")
      .def(py::init([](int fd, std::size_t nbytes, std::optional<int> device, py::handle runtime) {
             return imported_vmm{
                 imported_vmm_memory{fd, nbytes, device.value_or(-1), to_runtime(runtime)}};
           }),
           py::arg("fd"), py::arg("nbytes"), py::arg("device") = py::none(),
           py::arg("runtime") = py::none(), py::keep_alive<1, 5>())
      .def_property_readonly("ptr", [](imported_vmm const& i) { return to_int(i.get().get()); })
      .def_property_readonly("nbytes", [](imported_vmm const& i) { return i.get().size(); })
      .def_property_readonly("device", [](imported_vmm const& i) { return i.get().device(); })
      .def(
          "close", [](imported_vmm& i) { i.memory.reset(); }, "Unmaps it (again: nothing).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](imported_vmm& i, py::args) { i.memory.reset(); });
}

void bind_pools(py::module_& m)
{
  bind_imported_vmm(m);
  bind_enums(m);
  bind_properties(m);
  bind_pool_ref(m);
  bind_pool(m);
  bind_cuda_async(m);
}

}  // namespace gpumem::python
