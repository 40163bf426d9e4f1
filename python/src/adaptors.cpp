// python/src/adaptors.cpp — the resource adaptors: each adds one concern over its upstream and is
// stacked by the caller: StatisticsResourceAdaptor(PoolMemoryResource(CudaMemoryResource())).
// Each binds the C++ adaptor over the polymorphic upstream; the upstream's Python object is kept
// alive by the adaptor's.
#include "bindings.hpp"
#include "byte_size.hpp"

#include <pybind11/stl.h>

#include <gpumem/mr/aligned_resource_adaptor.hpp>
#include <gpumem/mr/failure_callback_resource_adaptor.hpp>
#include <gpumem/mr/limiting_resource_adaptor.hpp>
#include <gpumem/mr/logging_resource_adaptor.hpp>
#include <gpumem/mr/prefetch_resource_adaptor.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/statistics_resource_adaptor.hpp>
#include <gpumem/mr/thread_cache_resource_adaptor.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>
#include <gpumem/mr/thread_safe_resource_adaptor.hpp>
#include <gpumem/mr/tracking_resource_adaptor.hpp>

#include <iostream>

namespace gpumem::python {
namespace {
using mr::device_memory_resource;
template <class R>
using adaptor_class = py::class_<R, device_memory_resource, holder<R>>;
device_async_resource_ref upstream_ref(py::handle upstream)
{
  return device_async_resource_ref{to_resource(upstream)};
}

void bind_statistics(py::module_& m)
{
  using R       = mr::statistics_resource_adaptor<device_memory_resource>;
  using counter = R::counter;
  py::class_<counter>(m, "StatisticsCounter", "A count's current value, peak and running total.")
      .def_readonly("value", &counter::value)
      .def_readonly("peak", &counter::peak)
      .def_readonly("total", &counter::total)
      .def("__repr__", [](counter const& c) {
        return "StatisticsCounter(value=" + std::to_string(c.value) +
               ", peak=" + std::to_string(c.peak) + ", total=" + std::to_string(c.total) + ")";
      });
  auto const pair = [](std::pair<counter, counter> const& p) {
    return py::make_tuple(p.first, p.second);
  };
  adaptor_class<R>(m, "StatisticsResourceAdaptor", R"doc(
Counts bytes and allocations through it: current value, peak and total, readable at any time
(also while PyTorch or CuPy allocate through it, from any thread). ``push_counters()`` starts a
nested scope with zeroed counters; ``pop_counters()`` ends it, folds it into the enclosing scope
and returns it. ``allocation_counts`` gives all six numbers as a dict.
)doc")
      .def(py::init([](py::handle upstream) {
             return linked(upstream, std::make_shared<R>(upstream_ref(upstream)));
           }),
           py::arg("upstream"), py::keep_alive<1, 2>())
      .def("get_bytes_counter", &R::get_bytes_counter,
           "Bytes of the innermost scope (a StatisticsCounter).")
      .def("get_allocations_counter", &R::get_allocations_counter,
           "Allocation calls of the innermost scope (a StatisticsCounter).")
      .def(
          "push_counters", [pair](R& r) { return pair(r.push_counters()); },
          "Starts a scope with zeroed counters; returns the (bytes, allocations) counters before "
          "it.")
      .def(
          "pop_counters", [pair](R& r) { return pair(r.pop_counters()); },
          "Ends the innermost scope, folds it into the enclosing one and returns its counters. "
          "Raises IndexError when no scope was pushed.")
      .def_property_readonly("allocation_counts", [](R const& r) {
        auto const b = r.get_bytes_counter();
        auto const n = r.get_allocations_counter();
        py::dict d;
        d["current_bytes"] = b.value;
        d["peak_bytes"]    = b.peak;
        d["total_bytes"]   = b.total;
        d["current_count"] = n.value;
        d["peak_count"]    = n.peak;
        d["total_count"]   = n.total;
        return d;
      });
}

void bind_tracking(py::module_& m)
{
  using R = mr::tracking_resource_adaptor<device_memory_resource>;
  adaptor_class<R>(m, "TrackingResourceAdaptor", R"doc(
Remembers every live allocation (pointer, size and, with ``capture_stacks=True``, the allocating
C++ stack): a leak report at any time. ``get_outstanding_allocations()`` is a dict
{pointer: size}; read it while no other thread allocates through the adaptor.
)doc")
      .def(py::init([](py::handle upstream, bool capture_stacks) {
             return linked(upstream, std::make_shared<R>(upstream_ref(upstream), capture_stacks));
           }),
           py::arg("upstream"), py::arg("capture_stacks") = false, py::keep_alive<1, 2>())
      .def("get_allocated_bytes", &R::get_allocated_bytes, "Sum of the sizes of live allocations.")
      .def("get_outstanding_allocations",
           [](R const& r) {
             py::dict d;
             for (auto const& [ptr, info] : r.get_outstanding_allocations()) {
               d[py::int_(to_int(ptr))] = info.allocation_size;
             }
             return d;
           })
      .def("get_outstanding_allocations_str", &R::get_outstanding_allocations_str,
           "The leak report: a count line, then one line per allocation (and its stack).")
      .def(
          "log_outstanding_allocations",
          [](R const& r) { r.log_outstanding_allocations(std::clog); },
          "Writes the leak report to stderr when an allocation is outstanding.");
}

void bind_logging(py::module_& m)
{
  using R = mr::logging_resource_adaptor<device_memory_resource>;
  adaptor_class<R>(m, "LoggingResourceAdaptor", R"doc(
Logs every allocation and deallocation as CSV (``Thread,Time,Action,Pointer,Size,Stream``, the
format the gpumem tool replays) to ``log_file_name`` (truncated; None: the GPUMEM_LOG_FILE
environment variable, LogicError when unset). ``auto_flush`` flushes after each line;
otherwise call ``flush()``.
)doc")
      .def(py::init([](py::handle upstream, std::optional<std::string> file, bool auto_flush) {
             return linked(upstream, std::make_shared<R>(upstream_ref(upstream),
                                                         file ? *file : R::get_default_filename(),
                                                         auto_flush));
           }),
           py::arg("upstream"), py::arg("log_file_name") = py::none(),
           py::arg("auto_flush") = false, py::keep_alive<1, 2>())
      .def("flush", &R::flush, "Flushes the log.")
      .def_property_readonly("header", &R::header, "The CSV header line.")
      .def_static("get_default_filename", &R::get_default_filename,
                  "The value of GPUMEM_LOG_FILE (LogicError when unset).");
}

void bind_limiting(py::module_& m)
{
  using R = mr::limiting_resource_adaptor<device_memory_resource>;
  adaptor_class<R>(m, "LimitingResourceAdaptor", R"doc(
Lets at most ``allocation_limit`` bytes be allocated through it at once (each allocation charged
rounded up to ``alignment``); beyond it, allocate raises OutOfMemoryError naming the limit.
)doc")
      .def(py::init([](py::handle upstream, byte_size limit, std::size_t alignment) {
             return linked(upstream, std::make_shared<R>(upstream_ref(upstream), limit, alignment));
           }),
           py::arg("upstream"), py::arg("allocation_limit"),
           py::arg("alignment") = CUDA_ALLOCATION_ALIGNMENT, py::keep_alive<1, 2>())
      .def("get_allocated_bytes", &R::get_allocated_bytes, "Bytes currently charged.")
      .def("get_allocation_limit", &R::get_allocation_limit);
}

void bind_thread_cache(py::module_& m)
{
  using R = mr::thread_cache_resource_adaptor<device_memory_resource>;
  mr::thread_cache_options const defaults{};  // each default written once, in the C++ options
  adaptor_class<R>(m, "ThreadCacheResourceAdaptor", R"doc(
Keeps the blocks each thread frees, by stream and size class, and hands them back to the same
thread's next request of that class on the same stream without touching ``upstream`` (put it over
a PoolMemoryResource or ArenaMemoryResource). Requests above ``max_cached_size_bytes`` pass
through. Bytes cached are capped per thread (``thread_cap_bytes``), in total (``total_cap_bytes``)
and, over a PoolMemoryResource or VmmPoolMemoryResource, at ``pool_fraction`` of its pool size
(never below ``thread_floor_bytes`` per thread with a cache). ``trim()`` returns the
calling thread's cached blocks now and other threads' at their next call; ``stats`` gives hits,
misses, flushes, remote frees and bytes cached.
)doc")
      .def(py::init([](py::handle upstream, std::size_t max_cached, std::size_t thread_cap,
                       std::size_t total_cap, double fraction, std::size_t floor) {
             mr::thread_cache_options o{.max_cached_size_bytes = max_cached,
                                        .thread_cap_bytes      = thread_cap,
                                        .total_cap_bytes       = total_cap,
                                        .pool_fraction         = fraction,
                                        .thread_floor_bytes    = floor};
             // Built over the upstream pointer: the adaptor links to it and finds what lies
             // below it (pool size, growth hook) itself.
             return std::make_shared<R>(&to_resource(upstream), std::move(o));
           }),
           py::arg("upstream"), py::arg("max_cached_size_bytes") = defaults.max_cached_size_bytes,
           py::arg("thread_cap_bytes")   = defaults.thread_cap_bytes,
           py::arg("total_cap_bytes")    = defaults.total_cap_bytes,
           py::arg("pool_fraction")      = defaults.pool_fraction,
           py::arg("thread_floor_bytes") = defaults.thread_floor_bytes, py::keep_alive<1, 2>())
      .def("trim", &R::trim, "Returns cached blocks to the upstream (other threads' later).")
      .def_property_readonly("bad_deallocations", &R::bad_deallocations,
                             "Double frees, wrong sizes and unknown pointers seen.")
      .def("check_invariants", &R::check_invariants,
           "Raises LogicError naming the first broken invariant (call when no thread allocates).")
      .def_property_readonly("stats", [](R const& r) {
        auto const s = r.stats();
        py::dict d;
        d["hits"]           = s.hits;
        d["misses"]         = s.misses;
        d["flushed"]        = s.flushed;
        d["remote_frees"]   = s.remote_frees;
        d["passed_through"] = s.passed_through;
        d["growth_flushes"] = s.growth_flushes;
        d["bytes_cached"]   = s.bytes_cached;
        d["cap_bytes"]      = s.cap_bytes;
        py::list threads;
        for (auto const& t : s.per_thread) {
          py::dict td;
          td["thread"]       = t.thread;
          td["hits"]         = t.hits;
          td["misses"]       = t.misses;
          td["flushed"]      = t.flushed;
          td["bytes_cached"] = t.bytes_cached;
          threads.append(td);
        }
        d["per_thread"] = threads;
        return d;
      });
}

void bind_aligned(py::module_& m)
{
  using R = mr::aligned_resource_adaptor<device_memory_resource>;
  adaptor_class<R>(m, "AlignedResourceAdaptor", R"doc(
Aligns allocations of at least ``alignment_threshold`` bytes to ``alignment`` (a power of two,
may exceed 256) by over-allocating from ``upstream``.
)doc")
      .def(py::init([](py::handle upstream, std::size_t alignment, byte_size threshold) {
             return linked(upstream,
                           std::make_shared<R>(upstream_ref(upstream), alignment, threshold));
           }),
           py::arg("upstream"), py::arg("alignment") = CUDA_ALLOCATION_ALIGNMENT,
           py::arg("alignment_threshold") = R::default_alignment_threshold, py::keep_alive<1, 2>())
      .def_property_readonly("alignment", &R::alignment)
      .def_property_readonly("alignment_threshold", &R::alignment_threshold);
}

void bind_failure_callback(py::module_& m)
{
  using R = mr::failure_callback_resource_adaptor<device_memory_resource>;
  adaptor_class<R>(m, "FailureCallbackResourceAdaptor", R"doc(
Calls ``callback(nbytes) -> bool`` when ``upstream`` raises OutOfMemoryError: True retries the
allocation, False re-raises. The callback runs with the GIL held (e.g. free caches, collect
garbage, then return True).
)doc")
      .def(py::init([](py::handle upstream, py::function callback) {
             auto fn                   = std::make_shared<py::function>(std::move(callback));
             mr::failure_callback_t cb = [fn](std::size_t bytes, void*) {
               py::gil_scoped_acquire gil;
               return (*fn)(bytes).cast<bool>();
             };
             return linked(upstream,
                           std::make_shared<R>(upstream_ref(upstream), std::move(cb), nullptr));
           }),
           py::arg("upstream"), py::arg("callback"), py::keep_alive<1, 2>());
}

void bind_prefetch(py::module_& m)
{
  using R = mr::prefetch_resource_adaptor<device_memory_resource>;
  adaptor_class<R>(m, "PrefetchResourceAdaptor", R"doc(
Prefetches each new allocation to the current device on its stream (for managed memory: the
first kernel does not fault it in page by page).
)doc")
      .def(py::init([](py::handle upstream, py::handle runtime) {
             return linked(upstream,
                           std::make_shared<R>(upstream_ref(upstream), to_runtime(runtime)));
           }),
           py::arg("upstream"), py::kw_only(), py::arg("runtime") = py::none(),
           py::keep_alive<1, 2>(), py::keep_alive<1, 3>());
}

void bind_thread_safe(py::module_& m)
{
  using R = mr::thread_safe_resource_adaptor<device_memory_resource>;
  adaptor_class<R>(m, "ThreadSafeResourceAdaptor",
                   "Serializes allocate and deallocate of ``upstream`` with one mutex.")
      .def(py::init([](py::handle upstream) {
             return linked(upstream, std::make_shared<R>(upstream_ref(upstream)));
           }),
           py::arg("upstream"), py::keep_alive<1, 2>());
}
}  // namespace
}  // namespace gpumem::python

namespace gpumem::python {

void bind_adaptors(py::module_& m)
{
  bind_statistics(m);
  bind_tracking(m);
  bind_logging(m);
  bind_limiting(m);
  bind_aligned(m);
  bind_failure_callback(m);
  bind_prefetch(m);
  bind_thread_safe(m);
  bind_thread_cache(m);
}

}  // namespace gpumem::python
