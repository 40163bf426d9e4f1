// The drop-in caching allocator: CUB's names over detail::caching::caching_core.
#include <gpumem/caching_device_allocator.hpp>
#include <gpumem/error.hpp>

#include <exception>

namespace gpumem {
namespace {

using BlockDescriptor = caching_device_allocator::BlockDescriptor;

bool size_compare(BlockDescriptor const& a, BlockDescriptor const& b)
{
  return a.bytes == b.bytes ? a.device < b.device : a.bytes < b.bytes;
}

bool ptr_compare(BlockDescriptor const& a, BlockDescriptor const& b)
{
  return a.d_ptr == b.d_ptr ? a.device < b.device : a.d_ptr < b.d_ptr;
}

}  // namespace

void* caching_device_allocator::runtime_source::allocate(int, std::size_t bytes, cudaStream_t)
{
  return rt_.allocate(gpumem::memory_kind::device, bytes);
}

void caching_device_allocator::runtime_source::free(int, void* ptr, std::size_t,
                                                    cudaStream_t) noexcept
{
  rt_.free(gpumem::memory_kind::device, ptr);
}

unsigned int caching_device_allocator::IntPow(unsigned int base, unsigned int exp)
{
  unsigned int retval = 1;
  for (; exp > 0; --exp) { retval *= base; }
  return retval;
}

void caching_device_allocator::NearestPowerOf(unsigned int& power, std::size_t& rounded_bytes,
                                              unsigned int base, std::size_t value)
{
  auto const r  = detail::caching::nearest_power_of(base, value);
  power         = r.bin;
  rounded_bytes = r.bytes;
}

namespace {
detail::caching::bin_layout checked_layout(unsigned bin_growth, unsigned min_bin, unsigned max_bin)
{
  return detail::caching::bin_layout{bin_growth, min_bin, max_bin};  // throws for bad layouts
}
}  // namespace

caching_device_allocator::caching_device_allocator(unsigned int bin_growth, unsigned int min_bin,
                                                   unsigned int max_bin,
                                                   std::size_t max_cached_bytes, bool skip_cleanup,
                                                   bool debug, gpumem::runtime& runtime)
    : bin_growth{bin_growth},
      min_bin{min_bin},
      max_bin{max_bin},
      min_bin_bytes{checked_layout(bin_growth, min_bin, max_bin).min_bin_bytes()},
      max_bin_bytes{checked_layout(bin_growth, min_bin, max_bin).max_bin_bytes()},
      max_cached_bytes{*this},
      skip_cleanup{skip_cleanup},
      debug{*this},
      cached_bytes{*this, &caching_device_allocator::snapshot_cached_bytes},
      cached_blocks{*this, &caching_device_allocator::snapshot_cached_blocks},
      live_blocks{*this, &caching_device_allocator::snapshot_live_blocks},
      runtime_{&runtime},
      source_{runtime},
      core_{detail::caching::bin_layout{bin_growth, min_bin, max_bin}, max_cached_bytes, source_,
            runtime, true}
{
  core_.set_debug(debug);
}

caching_device_allocator::caching_device_allocator(bool skip_cleanup, bool debug,
                                                   gpumem::runtime& runtime)
    : caching_device_allocator{8,     3,      7, (std::size_t{2} << 20) * 3 - 1, skip_cleanup,
                               debug, runtime}
{
}

caching_device_allocator::max_cached_bytes_field::operator std::size_t() const noexcept
{
  return owner_->core_.max_cached_bytes();
}

auto caching_device_allocator::max_cached_bytes_field::operator=(std::size_t bytes)
    -> max_cached_bytes_field&
{
  owner_->core_.set_max_cached_bytes(bytes);
  return *this;
}

auto caching_device_allocator::max_cached_bytes_field::operator=(
    max_cached_bytes_field const& other) -> max_cached_bytes_field&
{
  return *this = static_cast<std::size_t>(other);
}

auto caching_device_allocator::max_cached_bytes_field::operator+=(std::size_t bytes)
    -> max_cached_bytes_field&
{
  return *this = static_cast<std::size_t>(*this) + bytes;
}

auto caching_device_allocator::max_cached_bytes_field::operator-=(std::size_t bytes)
    -> max_cached_bytes_field&
{
  return *this = static_cast<std::size_t>(*this) - bytes;
}

caching_device_allocator::debug_field::operator bool() const noexcept
{
  return owner_->core_.debug();
}

auto caching_device_allocator::debug_field::operator=(bool on) noexcept -> debug_field&
{
  owner_->core_.set_debug(on);
  return *this;
}

auto caching_device_allocator::debug_field::operator=(debug_field const& other) noexcept
    -> debug_field&
{
  return *this = static_cast<bool>(other);
}

caching_device_allocator::~caching_device_allocator()
{
  if (!skip_cleanup) { (void)FreeAllCached(); }
}

template <class F>
cudaError_t caching_device_allocator::guarded(F&& f) noexcept
{
  try {
    f();
    return cudaSuccess;
  } catch (out_of_memory const&) {
    return cudaErrorMemoryAllocation;
  } catch (cuda_error const& e) {
    return e.status();
  } catch (logic_error const&) {
    return cudaErrorInvalidDevice;
  } catch (std::bad_alloc const&) {
    return cudaErrorMemoryAllocation;
  } catch (...) {
    return cudaErrorUnknown;
  }
}

cudaError_t caching_device_allocator::SetMaxCachedBytes(std::size_t max_cached_bytes)
{
  return guarded([&] { core_.set_max_cached_bytes(max_cached_bytes); });
}

cudaError_t caching_device_allocator::DeviceAllocate(int device, void** d_ptr, std::size_t bytes,
                                                     cudaStream_t active_stream)
{
  if (d_ptr == nullptr) { return cudaErrorInvalidValue; }
  *d_ptr = nullptr;
  return guarded([&] {
    if (device == INVALID_DEVICE_ORDINAL) { device = runtime_->current_device(); }
    *d_ptr = core_.allocate(device, bytes, active_stream);
  });
}

cudaError_t caching_device_allocator::DeviceAllocate(void** d_ptr, std::size_t bytes,
                                                     cudaStream_t active_stream)
{
  return DeviceAllocate(INVALID_DEVICE_ORDINAL, d_ptr, bytes, active_stream);
}

cudaError_t caching_device_allocator::DeviceFree(int device, void* d_ptr)
{
  if (d_ptr == nullptr) { return cudaSuccess; }
  cudaError_t result = cudaSuccess;
  auto const status  = guarded([&] {
    if (device == INVALID_DEVICE_ORDINAL) { device = runtime_->current_device(); }
    if (core_.deallocate(device, d_ptr, std::nullopt) ==
        detail::caching::free_status::unknown_pointer) {
      result = cudaErrorInvalidValue;
    }
  });
  return status != cudaSuccess ? status : result;
}

cudaError_t caching_device_allocator::DeviceFree(void* d_ptr)
{
  return DeviceFree(INVALID_DEVICE_ORDINAL, d_ptr);
}

cudaError_t caching_device_allocator::FreeAllCached()
{
  return guarded([&] { core_.free_all_cached(); });
}

caching_device_allocator::GpuCachedBytes caching_device_allocator::snapshot_cached_bytes() const
{
  GpuCachedBytes out;
  for (int d = 0; d < core_.device_count(); ++d) {
    auto const t = core_.totals(d);
    if (t.free != 0 || t.live != 0) { out[d] = {t.free, t.live}; }
  }
  return out;
}

caching_device_allocator::CachedBlocks caching_device_allocator::snapshot_cached_blocks() const
{
  CachedBlocks out{size_compare};
  for (auto const& b : core_.blocks()) {
    if (!b.live) { out.insert({b.ptr, b.bytes, b.bin, b.device, b.stream, b.ready_event}); }
  }
  return out;
}

caching_device_allocator::BusyBlocks caching_device_allocator::snapshot_live_blocks() const
{
  BusyBlocks out{ptr_compare};
  for (auto const& b : core_.blocks()) {
    if (b.live) { out.insert({b.ptr, b.bytes, b.bin, b.device, b.stream, b.ready_event}); }
  }
  return out;
}

}  // namespace gpumem
