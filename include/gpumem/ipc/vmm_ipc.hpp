// gpumem/ipc/vmm_ipc.hpp — sharing a single-handle allocation of vmm_pool_memory_resource with
// another process.
//
//   exporter:  void* p = pool.allocate_single_handle(bytes, stream);
//              auto e  = pool.export_single_handle(p);       // a POSIX descriptor and the size
//              send_with_fd(sock, bytes_of(e.bytes), e.fd.get());
//   importer:  owned_fd fd = receive_with_fd(sock, bytes_of(size));
//              gpumem::imported_vmm_memory m{fd.get(), size};  // mapped, read-write here
//              ... use m.get() ..., then destroy m
//   exporter:  pool.deallocate(p, bytes, stream)              // after the importer is done
//
// The physical memory lives while any process maps it: the exporter's free releases only its own
// mapping. Ordering work between the processes is the caller's (e.g. an ipc_event); the importer
// should be done with the memory before the exporter reuses what it wrote.
#pragma once

#include <gpumem/runtime.hpp>
#include <gpumem/ipc/owned_fd.hpp>

#include <cstddef>

namespace gpumem {

/// A single-handle allocation exported for another process.
struct vmm_export {
  owned_fd fd;          ///< the physical allocation, as a POSIX file descriptor
  std::size_t bytes{};  ///< its size (the granularity-rounded size; map all of it)
  int device{};         ///< the device whose memory it is
};

/// Another process's single-handle allocation, mapped into this process's address space with
/// read-write access for one device. Move-only; the destructor unmaps it and releases this
/// process's handle (never throws).
class imported_vmm_memory {
 public:
  /// Imports the allocation behind `fd` (the descriptor stays the caller's), `bytes` long as
  /// exported, and grants `device` (-1: the current device) access. Throws logic_error when
  /// `bytes` is 0 or not a multiple of the device's granularity, cuda_error when the driver
  /// refuses the descriptor or the mapping; nothing is left behind.
  imported_vmm_memory(int fd, std::size_t bytes, int device = -1,
                      gpumem::runtime& runtime = gpumem::cuda_device());
  imported_vmm_memory(imported_vmm_memory&& other) noexcept;
  imported_vmm_memory& operator=(imported_vmm_memory&& other) noexcept;
  imported_vmm_memory(imported_vmm_memory const&)            = delete;
  imported_vmm_memory& operator=(imported_vmm_memory const&) = delete;
  ~imported_vmm_memory();

  [[nodiscard]] void* get() const noexcept { return ptr_; }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }
  [[nodiscard]] int device() const noexcept { return device_; }

 private:
  void reset() noexcept;

  gpumem::runtime* runtime_{};
  void* ptr_{};
  std::size_t bytes_{};
  gpumem::vmm_handle handle_{};
  int device_{};
};

}  // namespace gpumem
