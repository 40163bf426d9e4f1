// cuda_async_memory_resource and cuda_async_view_memory_resource: device_memory_resources over
// CUDA memory pools, built on memory_pool / memory_pool_ref.
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/cuda_async_view_memory_resource.hpp>
#include <gpumem/pool/pool_capabilities.hpp>

#include <cuda_runtime_api.h>

namespace gpumem::mr {
namespace {

int current_device_or_throw(gpumem::runtime& rt, char const* who)
{
  try {
    return rt.current_device();
  } catch (cuda_error const& e) {
    GPUMEM_FAIL(logic_error, detail::format(who,
                                            ": stream-ordered allocation is unavailable: no "
                                            "current CUDA device (",
                                            cudaGetErrorName(e.status()), ")"));
  }
}

void require_stream_ordered_allocation(gpumem::runtime& rt, char const* who, int device)
{
  auto const caps = query_pool_capabilities(cuda_device_id{device}, rt);
  auto why        = caps.device_unusable_reason;
  if (why.empty() && caps.driver_version < pools_min_driver) {
    why =
        detail::format("driver version ", caps.driver_version, " is older than ", pools_min_driver);
  }
  if (why.empty() && !caps.pools_supported) {
    why = detail::format("device ", device, " does not support memory pools");
  }
  GPUMEM_EXPECTS(why.empty(), logic_error,
                 detail::format(who, ": cudaMallocAsync is not supported: ", why));
}

memory_pool make_async_pool(std::optional<std::size_t> initial_pool_size,
                            std::optional<std::size_t> release_threshold,
                            std::optional<allocation_handle_type> export_handle_type,
                            gpumem::runtime& rt)
{
  pool_properties props{};
  props.handle_types = export_handle_type.value_or(allocation_handle_type::none);
  validate(props);  // e.g. win32 on POSIX: refused before any CUDA call
  int const device = current_device_or_throw(rt, "cuda_async_memory_resource");
  props.location   = pool_location::device(device);
  require_stream_ordered_allocation(rt, "cuda_async_memory_resource", device);
  memory_pool pool{props, rt};
  auto const [free, total] = rt.memory_info();
  pool.set<pool_attr::release_threshold>(release_threshold.value_or(total));
  auto const initial = initial_pool_size.value_or(free / 2);
  if (initial > 0) {
    pool.deallocate(pool.allocate(initial, cuda_stream_view{}), cuda_stream_view{});
    rt.stream_synchronize(nullptr);
  }
  return pool;
}

cudaMemPool_t pool_of(device_memory_resource const& mr) noexcept
{
  if (auto const* a = dynamic_cast<cuda_async_memory_resource const*>(&mr)) {
    return a->pool_handle();
  }
  if (auto const* v = dynamic_cast<cuda_async_view_memory_resource const*>(&mr)) {
    return v->pool_handle();
  }
  return nullptr;
}

}  // namespace

// -- cuda_async_memory_resource ------------------------------------------------------------------

cuda_async_memory_resource::cuda_async_memory_resource(
    std::optional<std::size_t> initial_pool_size, std::optional<std::size_t> release_threshold,
    std::optional<allocation_handle_type> export_handle_type, gpumem::runtime& rt)
    : pool_{make_async_pool(initial_pool_size, release_threshold, export_handle_type, rt)}
{
}

void* cuda_async_memory_resource::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  return pool_.allocate(bytes, stream);
}

void cuda_async_memory_resource::do_deallocate(void* ptr, std::size_t,
                                               cuda_stream_view stream) noexcept
{
  pool_.deallocate(ptr, stream);
}

bool cuda_async_memory_resource::do_is_equal(device_memory_resource const& other) const noexcept
{
  return pool_of(other) == pool_handle();
}

// -- cuda_async_view_memory_resource -------------------------------------------------------------

cuda_async_view_memory_resource::cuda_async_view_memory_resource(cudaMemPool_t pool_handle,
                                                                 gpumem::runtime& rt)
    : pool_{[&] {
        char const* who = "cuda_async_view_memory_resource";
        GPUMEM_EXPECTS(pool_handle != nullptr, logic_error,
                       "cuda_async_view_memory_resource: the pool handle is null");
        require_stream_ordered_allocation(rt, who, current_device_or_throw(rt, who));
        // A host or host NUMA pool is the one kind the CPU can access from the start.
        bool host_pool = false;
        try {
          host_pool = detail::get_pool_access(rt, pool_handle, pool_location::host()) ==
                      access_flags::read_write;
        } catch (cuda_error const&) {  // the driver does not answer for the host: a device pool
        }
        GPUMEM_EXPECTS(!host_pool, logic_error,
                       detail::format(who, ": pool ", static_cast<void*>(pool_handle),
                                      " holds pinned host memory (a host or host NUMA pool), not "
                                      "device memory; view a device's pool, or allocate from "
                                      "this one with memory_pool_ref::allocate"));
        auto const home = detail::find_pool_home(rt, pool_handle);
        GPUMEM_EXPECTS(
            home.has_value(), logic_error,
            detail::format(who, ": cannot tell which device pool ", static_cast<void*>(pool_handle),
                           " belongs to (several devices have read-write access); "
                           "construct it from memory_pool_ref{handle, location}"));
        return memory_pool_ref{pool_handle, *home, rt};
      }()}
{
}

cuda_async_view_memory_resource::cuda_async_view_memory_resource(memory_pool_ref pool) : pool_{pool}
{
  GPUMEM_EXPECTS(pool.handle() != nullptr, logic_error,
                 "cuda_async_view_memory_resource: the pool is empty (a moved-from memory_pool); "
                 "view a live pool");
}

void* cuda_async_view_memory_resource::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  return pool_.allocate(bytes, stream);
}

void cuda_async_view_memory_resource::do_deallocate(void* ptr, std::size_t,
                                                    cuda_stream_view stream) noexcept
{
  pool_.deallocate(ptr, stream);
}

bool cuda_async_view_memory_resource::do_is_equal(
    device_memory_resource const& other) const noexcept
{
  return pool_of(other) == pool_handle();
}

}  // namespace gpumem::mr
