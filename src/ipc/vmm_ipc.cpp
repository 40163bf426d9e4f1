// Importing a single-handle allocation of the virtual-memory pool. See gpumem/ipc/vmm_ipc.hpp.
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/vmm_single_handles.hpp>
#include <gpumem/error.hpp>
#include <gpumem/ipc/vmm_ipc.hpp>

#include <utility>

namespace gpumem {

imported_vmm_memory::imported_vmm_memory(int fd, std::size_t bytes, int device,
                                         gpumem::runtime& runtime)
    : runtime_{&runtime}, bytes_{bytes}, device_{device < 0 ? runtime.current_device() : device}
{
  auto const granularity = runtime.vmm_granularity(device_);
  GPUMEM_EXPECTS(bytes > 0 && bytes % granularity == 0, logic_error,
                 detail::format("cannot import ", bytes,
                                " bytes: an exported single-handle "
                                "allocation is a non-zero multiple of the granularity (",
                                granularity, " bytes on device ", device_,
                                "); pass the size export_single_handle gave"));
  handle_ = runtime.vmm_import_fd(fd);
  try {
    ptr_ = detail::map_whole(runtime, handle_, bytes, granularity, std::span{&device_, 1});
  } catch (...) {
    runtime.vmm_release(handle_);
    throw;
  }
}

imported_vmm_memory::imported_vmm_memory(imported_vmm_memory&& other) noexcept
    : runtime_{other.runtime_},
      ptr_{std::exchange(other.ptr_, nullptr)},
      bytes_{std::exchange(other.bytes_, 0)},
      handle_{std::exchange(other.handle_, gpumem::vmm_handle{})},
      device_{other.device_}
{
}

imported_vmm_memory& imported_vmm_memory::operator=(imported_vmm_memory&& other) noexcept
{
  if (this != &other) {
    reset();
    runtime_ = other.runtime_;
    ptr_     = std::exchange(other.ptr_, nullptr);
    bytes_   = std::exchange(other.bytes_, 0);
    handle_  = std::exchange(other.handle_, gpumem::vmm_handle{});
    device_  = other.device_;
  }
  return *this;
}

imported_vmm_memory::~imported_vmm_memory()
{
  reset();
}

void imported_vmm_memory::reset() noexcept
{
  if (ptr_ == nullptr) { return; }
  detail::unmap_whole(*runtime_, ptr_, bytes_);
  runtime_->vmm_release(handle_);
  ptr_ = nullptr;
}

}  // namespace gpumem
