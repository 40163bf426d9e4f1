// python/src/suballocators.cpp — the suballocators over any upstream: pool, arena, fixed_size,
// binning, caching. Each binds the C++ class instantiated over the polymorphic upstream
// (e.g. pool_memory_resource<device_memory_resource>). Keyword `runtime`: what the resource uses
// for events and synchronization; gpumem's Python layer passes the upstream's runtime by default.
#include "bindings.hpp"
#include "byte_size.hpp"

#include <pybind11/stl.h>

#include <gpumem/mr/arena_memory_resource.hpp>
#include <gpumem/mr/binning_memory_resource.hpp>
#include <gpumem/mr/caching_memory_resource.hpp>
#include <gpumem/mr/fixed_size_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

namespace gpumem::python {
namespace {

using mr::device_memory_resource;

template <class R>
using sub_class = py::class_<R, device_memory_resource, holder<R>>;

device_async_resource_ref upstream_ref(py::handle upstream)
{
  return device_async_resource_ref{to_resource(upstream)};
}

/// free_stats as a dict: free_bytes, blocks, largest_bytes.
template <class Stats>
py::dict free_stats_dict(Stats const& s)
{
  py::dict d;
  d["free_bytes"]    = s.free_bytes;
  d["blocks"]        = s.blocks;
  d["largest_bytes"] = s.largest_bytes;
  return d;
}

/// Members every stream-ordered suballocator (pool, fixed_size) shares.
template <class Class>
void def_stream_ordered(Class& c)
{
  using R = typename Class::type;
  c.def_property_readonly("pool_size", &R::pool_size,
                          "Bytes taken from upstream (free and in use).")
      .def(
          "get_free_stats", [](R const& r) { return free_stats_dict(r.get_free_stats()); },
          "Free memory over all streams: {'free_bytes', 'blocks', 'largest_bytes'}.")
      .def_property_readonly("bad_deallocations", &R::bad_deallocations,
                             "Deallocations of pointers not handed out (double or foreign frees).")
      .def("check_invariants", &R::check_invariants,
           "Raises LogicError naming the first broken invariant of the free lists.");
}

void bind_pool(py::module_& m)
{
  using R = mr::pool_memory_resource<device_memory_resource>;
  sub_class<R> c(m, "PoolMemoryResource", R"doc(
A coalescing best-fit suballocator over memory taken from ``upstream`` (C++
``gpumem::mr::pool_memory_resource``).

``initial_pool_size`` bytes are taken at construction (None: half of the runtime's free memory);
the pool grows on demand up to ``maximum_pool_size`` (None: as much as upstream gives). Sizes
must be multiples of 256. Stream-ordered: a block freed on a stream is reused at once on that
stream and reaches another stream only after that stream is ordered after the free.
Thread-safe. Memory returns upstream when the pool is destroyed. Out of memory raises
OutOfMemoryError naming the request, the pool size and maximum, and the largest free block.
)doc");
  c.def(py::init([](py::handle upstream, std::optional<byte_size> initial,
                    std::optional<byte_size> maximum, py::handle runtime) {
          auto& rt = to_runtime(runtime);
          std::size_t const initial_bytes =
              initial ? initial->bytes : (rt.memory_info().free_bytes / 2) & ~std::size_t{255};
          std::optional<std::size_t> const maximum_bytes =
              maximum ? std::optional<std::size_t>{maximum->bytes} : std::nullopt;
          return linked(upstream, std::make_shared<R>(upstream_ref(upstream), initial_bytes,
                                                      maximum_bytes, rt));
        }),
        py::arg("upstream"), py::arg("initial_pool_size") = py::none(),
        py::arg("maximum_pool_size") = py::none(), py::kw_only(), py::arg("runtime") = py::none(),
        py::keep_alive<1, 2>(), py::keep_alive<1, 5>())
      .def_property_readonly("maximum_pool_size", &R::maximum_pool_size,
                             "The size the pool may grow to (None: what upstream can give).");
  def_stream_ordered(c);
}

void bind_vmm_pool(py::module_& m)
{
  using R = mr::vmm_pool_memory_resource;
  mr::vmm_pool_options const defaults{};  // each default written once, in the C++ options
  sub_class<R> c(m, "VmmPoolMemoryResource", R"doc(
A coalescing best-fit pool over one large range of device address space that is backed by
physical memory only where it is needed (C++ ``gpumem::mr::vmm_pool_memory_resource``): as fast as
PoolMemoryResource on reuse, and about as lean as the driver's own pool, because free granules are
moved out of free holes to wherever a request needs contiguous memory.

``reserve_bytes`` (None: twice the device memory) of address space are reserved once;
``granularity_bytes`` (None: the device's) is the granule; new memory comes as physical handles
of at most ``handle_bytes`` at a growth's two ends and twice that between them (None: one handle
per growth; smaller handles hold less free memory beside live blocks and cost more driver calls
when the pool grows); ``growth_percent`` maps that share of
what is mapped ahead of a need, and ``busy_growth_percent`` when the pool grows while its one
stream's work still runs (no free memory can move then); above ``release_threshold_bytes`` (None: no limit) of free memory,
free granules go back to the device at each growth. ``trim_to(n)`` unmaps free granules until
at most n bytes are mapped; up to ``spare_bytes`` of their physical handles are kept unmapped and
mapped again by the next growth instead of new ones (``release_spares()`` gives them back; 0: none
are kept). ``peer_devices`` (device numbers) or ``all_peers=True`` give other
devices with peer capability read-write access to all of the pool's memory, so that their kernels
and copies can use it. ``shareable_handles=True`` makes the physical memory exportable as POSIX file
descriptors and ``gpu_direct_rdma=True`` marks it GPUDirect RDMA capable where the device supports
it: both are what NCCL's buffer registration asks for. ``pause()`` gives the pool's memory back
(docs/sleep.md): ``keep_offload_staging=True`` keeps the pinned host copy of an offload for the next
one, and ``offload_directory`` (None: ``TMPDIR``, else /tmp) is where ``pause(offload="file")``
writes. ``return_home=False`` keeps the layout where the last job left it: by default, when a free
leaves the whole pool free again and the stream's work is done, the next allocation moves the
handles that growths moved since back where they were the last time the pool was wholly free, so
a job run again and again keeps its footprint (``stats()``: ``home_returns``,
``home_moved_handles``). Takes memory from the runtime directly (no upstream).
)doc");
  c.def(py::init([](std::optional<std::size_t> reserve, std::optional<std::size_t> granularity,
                    unsigned growth, std::optional<std::size_t> threshold,
                    std::optional<int> device, py::handle runtime, std::vector<int> peers,
                    bool all_peers, unsigned busy, bool keep_staging, std::size_t spares,
                    bool shareable, bool rdma, std::optional<std::string> directory,
                    bool return_home, std::optional<std::size_t> handle) {
          mr::vmm_pool_options o;
          o.handle_bytes            = handle.value_or(0);
          o.return_home             = return_home;
          o.offload_directory       = directory.value_or("");
          o.spare_bytes             = spares;
          o.keep_offload_staging    = keep_staging;
          o.shareable_handles       = shareable;
          o.gpu_direct_rdma         = rdma;
          o.peer_devices            = std::move(peers);
          o.all_peers               = all_peers;
          o.reserve_bytes           = reserve.value_or(0);
          o.granularity_bytes       = granularity.value_or(0);
          o.growth_percent          = growth;
          o.busy_growth_percent     = busy;
          o.release_threshold_bytes = threshold.value_or(SIZE_MAX);
          o.device                  = device.value_or(-1);
          return std::make_shared<R>(o, to_runtime(runtime));
        }),
        py::kw_only(), py::arg("reserve_bytes") = py::none(),
        py::arg("granularity_bytes")       = py::none(),
        py::arg("growth_percent")          = defaults.growth_percent,
        py::arg("release_threshold_bytes") = py::none(), py::arg("device") = py::none(),
        py::arg("runtime") = py::none(), py::arg("peer_devices") = defaults.peer_devices,
        py::arg("all_peers")            = defaults.all_peers,
        py::arg("busy_growth_percent")  = defaults.busy_growth_percent,
        py::arg("keep_offload_staging") = defaults.keep_offload_staging,
        py::arg("spare_bytes")          = defaults.spare_bytes,
        py::arg("shareable_handles")    = defaults.shareable_handles,
        py::arg("gpu_direct_rdma")      = defaults.gpu_direct_rdma,
        py::arg("offload_directory") = py::none(), py::arg("return_home") = defaults.return_home,
        py::arg("handle_bytes") = defaults.handle_bytes, py::keep_alive<1, 7>())
      .def_property_readonly("granularity", &R::granularity, "The granule size in bytes.")
      .def(
          "mapped_runs",
          [](R& r) {
            std::vector<std::pair<std::uintptr_t, std::size_t>> out;
            {
              py::gil_scoped_release nogil;
              for (auto const& e : r.mapped_runs()) { out.emplace_back(to_int(e.ptr), e.bytes); }
            }
            return out;
          },
          "The runs of physical memory mapped now, as (address, bytes) in address order.")
      .def(
          "stats",
          [](R const& r) {
            auto const s = r.stats();
            py::dict d;
            d["mapped_bytes"]              = s.mapped_bytes;
            d["reserved_bytes"]            = s.reserved_bytes;
            d["free_bytes"]                = s.free_bytes;
            d["largest_free_bytes"]        = s.largest_free_bytes;
            d["handles"]                   = s.handles;
            d["spare_bytes"]               = s.spare_bytes;
            d["spare_handles"]             = s.spare_handles;
            d["held_bytes"]                = s.held_bytes;
            d["single_handle_allocations"] = s.single_handle_allocations;
            d["single_handle_bytes"]       = s.single_handle_bytes;
            d["home_returns"]              = s.home_returns;
            d["home_moved_handles"]        = s.home_moved_handles;
            put_pause_stats(d, s);
            return d;
          },
          "{'mapped_bytes', 'reserved_bytes', 'free_bytes', 'largest_free_bytes', 'handles', "
          "'spare_bytes', 'spare_handles', 'held_bytes', 'single_handle_allocations', "
          "'single_handle_bytes', 'home_returns', 'home_moved_handles', 'state', 'paused_bytes', "
          "'staging_bytes', 'offload_file_bytes', 'pauses', 'resumes', 'pause_seconds', "
          "'resume_seconds'}.")
      .def(
          "pause",
          [](R& r, py::object offload, py::object streams) {
            auto const mode  = to_pause_mode(offload);
            auto const named = to_streams(streams);
            py::gil_scoped_release nogil;
            return named ? r.pause(mode, *named) : r.pause(mode);
          },
          py::kw_only(), py::arg("offload") = false, py::arg("streams") = py::none(),
          "Gives all of the pool's physical memory back, keeping every address (docs/sleep.md). "
          "offload=True copies the contents to pinned host memory first (resume() copies them "
          "back), offload=\"file\" to a temporary file in offload_directory; otherwise they are "
          "lost. Synchronizes the device first, or, given `streams`, those streams only. Returns "
          "False when already paused. While paused, allocating raises PausedError; freeing works.")
      .def(
          "resume",
          [](R& r) {
            py::gil_scoped_release nogil;
            return r.resume();
          },
          "Maps the paused pool's memory again at the same addresses (and copies offloaded "
          "contents back). Returns False when active. On failure the pool stays paused with its "
          "offloaded contents.")
      .def_property_readonly(
          "state", [](R const& r) { return pause_state_name(r.state()); },
          "'active', 'paused_discarded' or 'paused_offloaded'.")
      .def(
          "allocate_single_handle",
          [](R& r, std::size_t nbytes, py::handle stream) {
            auto const s = to_stream(stream);
            py::gil_scoped_release nogil;
            return to_int(r.allocate_single_handle(nbytes, s));
          },
          py::arg("nbytes"), py::arg("stream") = py::none(),
          "Allocates `nbytes` (rounded up to the granularity) backed by one physical allocation "
          "of its own, exportable to another process with export_single_handle (also what RDMA "
          "or NCCL registration needs). Free it with deallocate(ptr, nbytes, stream).")
      .def(
          "export_single_handle",
          [](R const& r, std::uintptr_t ptr) {
            auto e = r.export_single_handle(to_ptr(ptr));
            return py::make_tuple(e.fd.release(), e.bytes, e.device);
          },
          py::arg("ptr"),
          "(fd, nbytes, device) for a pointer from allocate_single_handle: a new POSIX file "
          "descriptor (yours to close) that ImportedVmmMemory(fd, nbytes) maps in another "
          "process.")
      .def("trim_to", &R::trim_to, py::arg("bytes"),
           "Unmaps free granules until at most `bytes` are mapped, keeping up to spare_bytes of "
           "them as spare handles for the next growth; returns the bytes unmapped.")
      .def("release_spares", &R::release_spares,
           "Releases the spare handles a trim kept; returns the bytes released.")
      .def_property("release_threshold", &R::release_threshold, &R::set_release_threshold,
                    "Free bytes kept mapped at a growth.");
  def_stream_ordered(c);
}

void bind_fixed_size(py::module_& m)
{
  using R = mr::fixed_size_memory_resource<device_memory_resource>;
  sub_class<R> c(m, "FixedSizeMemoryResource", R"doc(
Blocks of one size (``block_size``, default 1 MiB) carved from chunks of
``blocks_to_preallocate`` (default 128) blocks taken from ``upstream``. A request larger than
the block size raises; smaller requests take a whole block. Stream-ordered like the pool.
)doc");
  c.def(py::init(
            [](py::handle upstream, byte_size block_size, std::size_t blocks, py::handle runtime) {
              return linked(upstream, std::make_shared<R>(upstream_ref(upstream), block_size,
                                                          blocks, to_runtime(runtime)));
            }),
        py::arg("upstream"), py::arg("block_size") = R::default_block_size,
        py::arg("blocks_to_preallocate") = R::default_blocks_to_preallocate, py::kw_only(),
        py::arg("runtime") = py::none(), py::keep_alive<1, 2>(), py::keep_alive<1, 5>())
      .def_property_readonly("block_size", &R::get_block_size);
  def_stream_ordered(c);
}

void bind_arena(py::module_& m)
{
  using R = mr::arena_memory_resource<device_memory_resource>;
  sub_class<R>(m, "ArenaMemoryResource", R"doc(
A global arena of ``arena_size`` bytes (None: half of free device memory) from ``upstream``, with
per-thread and per-stream arenas of superblocks: address-ordered first fit, coalescing, little
contention between threads. ``dump_log_on_failure`` writes the arenas' state when an allocation
fails. ``defragment()`` synchronizes and returns empty superblocks to the global arena.
)doc")
      .def(py::init([](py::handle upstream, std::optional<byte_size> arena_size, bool dump,
                       py::handle runtime) {
             std::optional<std::size_t> const bytes =
                 arena_size ? std::optional<std::size_t>{arena_size->bytes} : std::nullopt;
             return linked(upstream, std::make_shared<R>(upstream_ref(upstream), bytes, dump,
                                                         to_runtime(runtime)));
           }),
           py::arg("upstream"), py::arg("arena_size") = py::none(),
           py::arg("dump_log_on_failure") = false, py::kw_only(), py::arg("runtime") = py::none(),
           py::keep_alive<1, 2>(), py::keep_alive<1, 5>())
      .def_property_readonly("arena_size", &R::arena_size, "Size of the global arena in bytes.")
      .def("defragment", &R::defragment, py::call_guard<py::gil_scoped_release>())
      .def("check_invariants", &R::check_invariants);
}

void bind_binning(py::module_& m)
{
  using R = mr::binning_memory_resource<device_memory_resource>;
  sub_class<R>(m, "BinningMemoryResource", R"doc(
Routes each request to the smallest bin that fits: bins of 2**min_size_exponent ..
2**max_size_exponent bytes (fixed_size resources it creates) or bins added with ``add_bin``;
larger requests go to ``upstream``. With no exponents there are no bins until ``add_bin``.
)doc")
      .def(py::init([](py::handle upstream, std::optional<int> min_exp, std::optional<int> max_exp,
                       py::handle runtime) {
             auto& rt = to_runtime(runtime);
             if (min_exp.has_value() != max_exp.has_value()) {
               throw py::value_error(
                   "give both min_size_exponent and max_size_exponent, or neither");
             }
             if (!min_exp) {
               return linked(upstream, std::make_shared<R>(upstream_ref(upstream), rt));
             }
             return linked(upstream, std::make_shared<R>(upstream_ref(upstream),
                                                         static_cast<std::int8_t>(*min_exp),
                                                         static_cast<std::int8_t>(*max_exp), rt));
           }),
           py::arg("upstream"), py::arg("min_size_exponent") = py::none(),
           py::arg("max_size_exponent") = py::none(), py::kw_only(),
           py::arg("runtime") = py::none(), py::keep_alive<1, 2>(), py::keep_alive<1, 5>())
      .def(
          "add_bin",
          [](R& r, std::size_t allocation_size, py::handle bin) {
            if (bin.is_none()) {
              r.add_bin(allocation_size);
            } else {
              r.add_bin(allocation_size, device_async_resource_ref{to_resource(bin)});
            }
          },
          py::arg("allocation_size"), py::arg("bin_resource") = py::none(), py::keep_alive<1, 3>(),
          "Serves requests up to `allocation_size` from `bin_resource` (or a new fixed-size bin).")
      .def("check_invariants", &R::check_invariants);
}

void bind_caching(py::module_& m)
{
  using R       = mr::caching_memory_resource;
  using options = mr::caching_memory_resource_options;
  sub_class<R>(m, "CachingMemoryResource", R"doc(
A caching allocator with geometric bins (CUB's semantics): requests round up to
``bin_growth**k`` for ``min_bin <= k <= max_bin``; freed blocks are cached per bin, up to
``max_cached_bytes`` in total; larger requests go straight to ``upstream``. Defaults 8, 3, 7 and
6 MiB - 1, as CUB's CachingDeviceAllocator. ``free_all_cached()`` returns the cache upstream.
)doc")
      .def(py::init([](py::handle upstream, unsigned bin_growth, unsigned min_bin, unsigned max_bin,
                       std::size_t max_cached_bytes, bool debug, py::handle runtime) {
             options const o{.bin_growth       = bin_growth,
                             .min_bin          = min_bin,
                             .max_bin          = max_bin,
                             .max_cached_bytes = max_cached_bytes,
                             .debug            = debug};
             return linked(upstream,
                           std::make_shared<R>(upstream_ref(upstream), o, to_runtime(runtime)));
           }),
           py::arg("upstream"), py::arg("bin_growth") = options{}.bin_growth,
           py::arg("min_bin") = options{}.min_bin, py::arg("max_bin") = options{}.max_bin,
           py::arg("max_cached_bytes") = options{}.max_cached_bytes,
           py::arg("debug") = options{}.debug, py::kw_only(), py::arg("runtime") = py::none(),
           py::keep_alive<1, 2>(), py::keep_alive<1, 8>())
      .def("free_all_cached", &R::free_all_cached, py::call_guard<py::gil_scoped_release>())
      .def("set_max_cached_bytes", &R::set_max_cached_bytes, py::arg("bytes"))
      .def_property_readonly("bad_deallocations", &R::bad_deallocations)
      .def("check_invariants", &R::check_invariants);
}
}  // namespace
}  // namespace gpumem::python

namespace gpumem::python {

void bind_suballocators(py::module_& m)
{
  bind_pool(m);
  bind_vmm_pool(m);
  bind_fixed_size(m);
  bind_arena(m);
  bind_binning(m);
  bind_caching(m);
}

}  // namespace gpumem::python
