// Bodies of the leaf resources that are not header-only: system, sam_headroom, pinned host.
#include <gpumem/detail/aligned_host.hpp>
#include <gpumem/detail/runtime_leaf_resource.hpp>
#include <gpumem/detail/pinned_host.hpp>
#include <gpumem/mr/pinned_host_memory_resource.hpp>
#include <gpumem/mr/pinned_memory_resource.hpp>
#include <gpumem/mr/sam_headroom_memory_resource.hpp>
#include <gpumem/mr/system_memory_resource.hpp>

#include <algorithm>
#include <new>

namespace gpumem {
namespace detail {

void throw_leaf_oom(char const* who, runtime& rt, std::size_t bytes, char const* cause)
{
  std::string free_text = "free memory unknown";
  try {
    auto const info = rt.memory_info();
    free_text       = format(bytes_str(info.free_bytes), " free of ", bytes_str(info.total_bytes));
  } catch (std::exception const&) {  // NOLINT(bugprone-empty-catch): keep the first failure
  }
  GPUMEM_FAIL(out_of_memory, format(who, ": cannot allocate ", bytes_str(bytes), ": ", free_text,
                                    " (a leaf resource keeps no free lists; fragmentation 0). ",
                                    "Cause: ", cause));
}

}  // namespace detail

namespace mr {

// -- system_memory_resource ----------------------------------------------------------------------

namespace {
constexpr std::size_t max_virtual_bytes = std::size_t{1} << 48;
}  // namespace

bool is_system_memory_supported(gpumem::runtime& rt, int device)
{
  return rt.device_attribute(cudaDevAttrPageableMemoryAccess, device) == 1;
}

system_memory_resource::system_memory_resource(gpumem::runtime& rt) : runtime_{&rt}
{
  auto const device = rt.current_device();
  GPUMEM_EXPECTS(is_system_memory_supported(rt, device), logic_error,
                 detail::format("system_memory_resource: device ", device,
                                " cannot access system memory (needs HMM or ATS)"));
}

void* system_memory_resource::do_allocate(std::size_t bytes, cuda_stream_view)
{
  // No request beyond the 48-bit virtual address space can succeed; refusing it here also avoids
  // libstdc++'s aligned operator new wrapping sizes near SIZE_MAX around to 0.
  if (bytes > max_virtual_bytes) {
    detail::throw_leaf_oom("system_memory_resource", *runtime_, bytes,
                           "larger than the 256 TiB virtual address space");
  }
  try {
    return ::operator new (bytes, std::align_val_t{CUDA_ALLOCATION_ALIGNMENT});
  } catch (std::bad_alloc const&) {
    detail::throw_leaf_oom("system_memory_resource", *runtime_, bytes, "operator new failed");
  }
}

void system_memory_resource::do_deallocate(void* ptr, std::size_t, cuda_stream_view stream) noexcept
{
  try {
    runtime_->stream_synchronize(stream);  // the GPU may still be using the memory
  } catch (std::exception const&) {        // NOLINT(bugprone-empty-catch): deallocate never throws
  }
  ::operator delete (ptr, std::align_val_t{CUDA_ALLOCATION_ALIGNMENT});
}

bool system_memory_resource::do_is_equal(device_memory_resource const& other) const noexcept
{
  return dynamic_cast<system_memory_resource const*>(&other) != nullptr;
}

// -- sam_headroom_memory_resource ----------------------------------------------------------------

sam_headroom_memory_resource::sam_headroom_memory_resource(std::size_t headroom,
                                                           gpumem::runtime& rt)
    : system_{rt}, headroom_{headroom}
{
}

void* sam_headroom_memory_resource::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  void* ptr = system_.allocate(bytes, stream);
  auto& rt  = system_.get_runtime();
  try {  // every runtime call below may fail: the memory goes back then
    auto const free   = rt.memory_info().free_bytes;
    auto const usable = free > headroom_ ? free - headroom_ : 0;
    auto const gpu    = align_down(std::min(usable, bytes), CUDA_ALLOCATION_ALIGNMENT);
    if (gpu > 0) { rt.advise_preferred_location(ptr, gpu, {rt.current_device()}); }
    if (bytes > gpu) {
      rt.advise_preferred_location(static_cast<char*>(ptr) + gpu, bytes - gpu, {});
    }
  } catch (...) {
    system_.deallocate(ptr, bytes, stream);
    throw;
  }
  return ptr;
}

void sam_headroom_memory_resource::do_deallocate(void* ptr, std::size_t bytes,
                                                 cuda_stream_view stream) noexcept
{
  system_.deallocate(ptr, bytes, stream);
}

bool sam_headroom_memory_resource::do_is_equal(device_memory_resource const& other) const noexcept
{
  auto const* o = dynamic_cast<sam_headroom_memory_resource const*>(&other);
  return o != nullptr && o->headroom_ == headroom_;
}

// -- pinned host ---------------------------------------------------------------------------------

}  // namespace mr

namespace detail {

void* pinned_host_allocate(runtime& rt, char const* who, std::size_t bytes, std::size_t alignment)
{
  auto take = [&](std::size_t n) {
    try {
      return rt.allocate(memory_kind::pinned_host, n);
    } catch (out_of_memory const& e) {
      throw_leaf_oom(who, rt, n, e.what());
    } catch (cuda_error const& e) {
      GPUMEM_FAIL(bad_alloc, format(who, ": cannot allocate ", bytes_str(n), ": ", e.what()));
    }
  };
  return aligned_host_allocate(bytes, host_alignment(alignment), take);
}

void pinned_host_deallocate(runtime& rt, void* ptr, std::size_t alignment) noexcept
{
  aligned_host_deallocate(ptr, host_alignment(alignment),
                          [&](void* p) { rt.free(memory_kind::pinned_host, p); });
}

}  // namespace detail

namespace mr {

void* pinned_host_memory_resource::allocate(std::size_t bytes, std::size_t alignment)
{
  if (bytes == 0) { return nullptr; }
  return detail::pinned_host_allocate(gpumem::cuda_device(), "pinned_host_memory_resource", bytes,
                                      alignment);
}

void pinned_host_memory_resource::deallocate(void* ptr, std::size_t, std::size_t alignment) noexcept
{
  if (ptr != nullptr) { detail::pinned_host_deallocate(gpumem::cuda_device(), ptr, alignment); }
}

void* pinned_memory_resource::do_allocate(std::size_t bytes, std::size_t alignment)
{
  return detail::pinned_host_allocate(*runtime_, "pinned_memory_resource", bytes, alignment);
}

void pinned_memory_resource::do_deallocate(void* ptr, std::size_t, std::size_t alignment) noexcept
{
  detail::pinned_host_deallocate(*runtime_, ptr, alignment);
}

}  // namespace mr
}  // namespace gpumem
