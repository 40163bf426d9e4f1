// The virtual-memory pool's slow paths. See mr/vmm_pool_memory_resource.hpp.
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

namespace gpumem::mr {
namespace {

detail::vmm_backing_options backing_options(vmm_pool_options const& o)
{
  return {o.reserve_bytes,       o.granularity_bytes, o.growth_percent,
          o.busy_growth_percent, o.handle_bytes,      o.device,
          o.peer_devices,        o.all_peers};
}

}  // namespace

vmm_pool_memory_resource::vmm_pool_memory_resource(vmm_pool_options const& options,
                                                   detail::runtime& runtime)
    : base{runtime, detail::coalescing_free_list{}},
      options_{options},
      backing_{runtime, backing_options(options)},
      singles_{runtime, backing_.device(), backing_.peers(), backing_.granularity()},
      threshold_{options.release_threshold_bytes}
{
  register_range(backing_.range());
}

vmm_pool_memory_resource::~vmm_pool_memory_resource()
{
  release_all();
}

std::size_t vmm_pool_memory_resource::allocation_size(std::size_t bytes) const
{
  auto const limit = backing_.range().size;
  GPUMEM_EXPECTS(
      can_align_up(bytes, allocation_alignment) && bytes <= limit, out_of_memory,
      detail::format(resource_name, ": cannot allocate ", detail::bytes_str(bytes),
                     ": larger than the reserved address space ", detail::bytes_str(limit)));
  return align_up(bytes, allocation_alignment);
}

detail::free_block vmm_pool_memory_resource::grow_in_place(detail::coalescing_free_list& idle,
                                                           std::size_t size, bool may_move)
{
  if (!may_move) {  // new memory only; out_of_memory lets the caller settle and move
    backing_.extend(idle, size, false);
    return idle.take(size);
  }
  try {
    backing_.extend(idle, size);
  } catch (out_of_memory const&) {  // give back every free granule, then try once more
    backing_.release_idle(idle, 0);
    singles_.release_passed(false);
    try {
      backing_.extend(idle, size);
    } catch (out_of_memory const& e) {
      fail(idle, size, e.what());
    }
  }
  auto const block = idle.take(size);  // extend() made room for it
  apply_threshold(idle);
  return block;
}

void vmm_pool_memory_resource::apply_threshold(detail::coalescing_free_list& idle) noexcept
{
  auto const free      = idle.stats().free_bytes;
  auto const threshold = threshold_.load();
  if (free <= threshold) { return; }
  backing_.release_idle(idle, backing_.mapped_bytes() - (free - threshold));
}

void vmm_pool_memory_resource::fail(detail::coalescing_free_list const& idle, std::size_t size,
                                    char const* why) const
{
  auto const free = idle.stats();
  GPUMEM_FAIL(
      out_of_memory,
      detail::format(resource_name, ": cannot allocate ", detail::bytes_str(size),
                     ": physical memory mapped ", detail::bytes_str(backing_.mapped_bytes()),
                     ", free ", detail::bytes_str(free.free_bytes), " (largest free block ",
                     detail::bytes_str(free.largest_bytes), "), address space left ",
                     detail::bytes_str(backing_.unmapped_bytes()), "; ", why));
}

std::size_t vmm_pool_memory_resource::trim_to(std::size_t bytes)
{
  auto const released = with_idle(
      [&](detail::coalescing_free_list& idle) { return backing_.release_idle(idle, bytes); });
  return released + singles_.release_passed(false);  // the device synchronized: all passed
}

void* vmm_pool_memory_resource::allocate_single_handle(std::size_t bytes, cuda_stream_view)
{
  singles_.release_passed(false);
  try {
    return singles_.allocate(bytes);
  } catch (out_of_memory const&) {  // the pool's free memory may be what is missing
    trim_to(0);                     // (also releases the single handles freed meanwhile)
    return singles_.allocate(bytes);
  }
}

vmm_export vmm_pool_memory_resource::export_single_handle(void const* ptr) const
{
  auto [fd, bytes] = singles_.export_fd(ptr);
  return vmm_export{owned_fd{fd}, bytes, backing_.device()};
}

// A pointer outside the pool's range is a single-handle allocation or a bad free (the core
// reports it); inside, the core's path. The extra cost on the hot path: one relaxed load.
void vmm_pool_memory_resource::do_deallocate(void* ptr, std::size_t bytes,
                                             cuda_stream_view stream) noexcept
{
  if (singles_.count() != 0 && !in_range(ptr)) {
    if (auto const requested = singles_.deallocate(ptr, stream.value())) {
      if (!size_matches(bytes, align_up(*requested, allocation_alignment))) {
        report_bad(ptr, bytes,
                   detail::format("size differs from the single-handle allocation (", *requested,
                                  " bytes); it is freed"));
      }
      return;
    }
  }
  base::do_deallocate(ptr, bytes, stream);
}

vmm_pool_stats vmm_pool_memory_resource::stats() const
{
  auto const free = get_free_stats();
  vmm_pool_stats s{};
  s.free_bytes         = free.free_bytes;
  s.largest_free_bytes = free.largest_bytes;
  // The backing changes only under the grow lock: read it there.
  const_cast<vmm_pool_memory_resource*>(this)->under_grow_lock([&] {
    s.mapped_bytes   = backing_.mapped_bytes();
    s.reserved_bytes = backing_.range().size;
    s.handles        = backing_.handle_count();
  });
  s.single_handle_allocations = singles_.count();
  s.single_handle_bytes       = singles_.mapped_bytes();
  return s;
}

}  // namespace gpumem::mr
