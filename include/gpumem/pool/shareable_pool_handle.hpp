// gpumem/pool/shareable_pool_handle.hpp — the OS handle a pool is exported as:
// an owned file descriptor (posix_file_descriptor) or fabric handle bytes (fabric).
//
// Move-only: the descriptor is closed when the handle dies. Send it to another process with
// send_with_fd (fd_passing.hpp) or, for fabric, copy bytes() by any means.
#pragma once

#include <gpumem/pool/allocation_handle_type.hpp>
#include <gpumem/ipc/owned_fd.hpp>

#include <array>
#include <cstddef>

namespace gpumem::pools {

/// The 64 opaque bytes of a fabric handle (cudaMemFabricHandle_t).
struct fabric_handle {
  std::array<std::byte, 64> bytes{};
};

class shareable_pool_handle {
 public:
  /// Wraps a received descriptor (posix_file_descriptor).
  explicit shareable_pool_handle(owned_fd fd) noexcept
      : type_{allocation_handle_type::posix_file_descriptor}, fd_{std::move(fd)}
  {
  }
  /// Wraps received fabric handle bytes.
  explicit shareable_pool_handle(fabric_handle fabric) noexcept
      : type_{allocation_handle_type::fabric}, fabric_{fabric}
  {
  }

  [[nodiscard]] allocation_handle_type type() const noexcept { return type_; }
  /// The descriptor (-1 for fabric handles or after release_fd()).
  [[nodiscard]] int fd() const noexcept { return fd_.get(); }
  /// Gives the descriptor's ownership to the caller.
  [[nodiscard]] owned_fd release_fd() noexcept { return std::move(fd_); }
  [[nodiscard]] fabric_handle const& fabric() const noexcept { return fabric_; }

 private:
  allocation_handle_type type_;
  owned_fd fd_{};
  fabric_handle fabric_{};
};

}  // namespace gpumem::pools

// The earlier spellings: each name is also gpumem::<name> (the same entity).
namespace gpumem {
using pools::fabric_handle;
using pools::shareable_pool_handle;
}  // namespace gpumem
