// THE factory table: every resource buildable from a spec, listed once: adding a resource to the
// spec grammar, the tool and Python means adding one entry here, nowhere else.
// `gpumem replay --list-resources` shows the table.
#include "defaults.hpp"
#include "peers.hpp"

#include <gpumem/spec/resource_factory.hpp>

#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/mr/sam_headroom_memory_resource.hpp>
#include <gpumem/mr/system_memory_resource.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include "factory_entries.inc"

namespace gpumem::spec {
namespace {

using dmr     = mr::device_memory_resource;
using dmr_ptr = std::unique_ptr<dmr>;
using namespace detail_defaults;

std::vector<factory_entry> leaves()
{
  std::vector<factory_entry> t;
  t.push_back({"cuda",
               resource_kind::leaf,
               "device memory from cudaMalloc/cudaFree (the cudaMalloc peer)",
               {},
               false,
               [](layer_args const&, dmr*, build_context const& c) -> dmr_ptr {
                 return std::make_unique<mr::cuda_memory_resource>(*c.runtime);
               },
               "cuda"});
  t.push_back({"cuda_async",
               resource_kind::leaf,
               "CUDA stream-ordered allocator over a pool it owns (cudaMallocFromPoolAsync)",
               {{"initial", "none", "bytes reserved up front, or none for half of the free memory"},
                {"release_threshold", "none", "bytes kept at a synchronization, or none for all"}},
               true,
               detail_peers::make_cuda_async});
  mr::vmm_pool_options const vmm{};  // the defaults, written once (mr/vmm_pool_options.hpp)
  t.push_back(
      {"vmm_pool",
       resource_kind::leaf,
       "best-fit pool over reserved address space, backed by physical memory on demand",
       {{"reserve", size_or_none(vmm.reserve_bytes, 0),
         "address space reserved, or none for twice the device memory"},
        {"granularity", size_or_none(vmm.granularity_bytes, 0),
         "granule bytes, or none for the device's granularity"},
        {"growth", count_text(vmm.growth_percent),
         "new memory mapped beyond a need, in % of what is mapped"},
        {"busy_growth", count_text(vmm.busy_growth_percent),
         "the same while the stream's work still runs (nothing can move: fewer, larger growths)"},
        {"handle", size_or_none(vmm.handle_bytes, 0),
         "largest physical handle at a growth's ends (twice that between), or none for one "
         "per growth"},
        {"release_threshold", size_or_none(vmm.release_threshold_bytes, SIZE_MAX),
         "free bytes kept mapped at a growth, or none for all"},
        {"spares", size_to_string(vmm.spare_bytes),
         "physical handles kept, unmapped, after a trim for the next growth (0: none)"},
        {"home", flag_text(vmm.return_home),
         "when all memory is free again, moved memory goes back where it was the last time "
         "(repeated jobs keep their footprint)"},
        {"peers", vmm.all_peers ? "all" : "none",
         "other devices given access: all (every peer-capable one) or none"},
        {"shareable", flag_text(vmm.shareable_handles),
         "memory exportable as POSIX file descriptors (NCCL buffer registration needs it)"},
        {"rdma", flag_text(vmm.gpu_direct_rdma),
         "memory GPUDirect RDMA capable where the device supports it (NCCL over the network)"}},
       false,
       [](layer_args const& a, dmr*, build_context const& c) -> dmr_ptr {
         mr::vmm_pool_options o;
         auto const peers = a.text("peers");
         if (peers != "all" && peers != "none") {
           throw spec_error{"vmm_pool: peers must be all or none, got " + peers};
         }
         o.all_peers         = peers == "all";
         o.shareable_handles = a.flag("shareable");
         o.gpu_direct_rdma   = a.flag("rdma");
         o.return_home       = a.flag("home");
         auto bytes_or       = [&](char const* key, std::size_t none, std::size_t least = 1) {
           return a.text(key) == "none" ? none : a.bytes(key, least, most_device_bytes);
         };
         o.reserve_bytes     = bytes_or("reserve", 0);
         o.granularity_bytes = bytes_or("granularity", 0);
         o.handle_bytes      = bytes_or("handle", 0);
         auto percent        = [&](char const* key) {
           auto const v = a.number(key);
           if (!(v >= 0 && v <= 1000)) {
             throw spec_error{std::string{"vmm_pool: "} + key +
                              " must be a percentage from 0 to 1000, got " + a.text(key)};
           }
           return static_cast<unsigned>(v);
         };
         o.growth_percent          = percent("growth");
         o.busy_growth_percent     = percent("busy_growth");
         o.release_threshold_bytes = bytes_or("release_threshold", SIZE_MAX, 0);
         o.spare_bytes             = a.bytes("spares", 0, most_device_bytes);
         return std::make_unique<mr::vmm_pool_memory_resource>(o, *c.runtime);
       },
       "vmm_pool"});
  t.push_back({"managed",
               resource_kind::leaf,
               "unified memory from cudaMallocManaged",
               {},
               false,
               [](layer_args const&, dmr*, build_context const& c) -> dmr_ptr {
                 return std::make_unique<mr::managed_memory_resource>(*c.runtime);
               }});
  t.push_back({"system",
               resource_kind::leaf,
               "malloc'ed memory the GPU reaches through HMM/ATS",
               {},
               true,
               [](layer_args const&, dmr*, build_context const& c) -> dmr_ptr {
                 return std::make_unique<mr::system_memory_resource>(*c.runtime);
               }});
  t.push_back({"sam_headroom",
               resource_kind::leaf,
               "system memory keeping GPU headroom free",
               {{"headroom", "1GiB", "device memory left free for other CUDA calls"}},
               true,
               [](layer_args const& a, dmr*, build_context const& c) -> dmr_ptr {
                 return std::make_unique<mr::sam_headroom_memory_resource>(a.bytes("headroom"),
                                                                           *c.runtime);
               }});
  return t;
}

std::vector<factory_entry> peers()
{
  std::vector<factory_entry> t;
  t.push_back({"cuda_malloc_async",
               resource_kind::peer,
               "peer: cudaMallocAsync on the device's default pool, release threshold at maximum",
               {},
               true,
               detail_peers::make_cuda_malloc_async,
               "cuda_malloc_async"});
  t.push_back({"cub_caching",
               resource_kind::peer,
               "peer: CUB's cub::CachingDeviceAllocator (defaults as CUB's; 'max' = unbounded)",
               {{"bin_growth", "8", "geometric growth factor of the bins"},
                {"min_bin", "3", "smallest bin: bin_growth^min_bin bytes"},
                {"max_bin", "7", "largest bin (larger requests are not cached), or max"},
                {"max_cached", "6291455", "most bytes cached per device, or max"}},
               true,
               detail_peers::make_cub_caching,
               "cub_caching"});
  return t;
}

}  // namespace

std::span<factory_entry const> factory_table()
{
  static std::vector<factory_entry> const table = [] {
    std::vector<factory_entry> t;
    for (auto&& group : {optional_suballocators(), leaves(), optional_adaptors(), peers()}) {
      t.insert(t.end(), group.begin(), group.end());
    }
    return t;
  }();
  return table;
}

}  // namespace gpumem::spec
