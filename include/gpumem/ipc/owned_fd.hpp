// gpumem/ipc/owned_fd.hpp — an owned POSIX file descriptor (closed by the destructor).
// Move-only. Used for exported pool handles and for descriptors received over a socket.
#pragma once

#include <utility>

namespace gpumem {

class owned_fd {
 public:
  owned_fd() noexcept = default;
  /// Takes ownership of `fd` (-1: empty).
  explicit owned_fd(int fd) noexcept : fd_{fd} {}
  owned_fd(owned_fd&& other) noexcept : fd_{std::exchange(other.fd_, -1)} {}
  owned_fd& operator=(owned_fd&& other) noexcept
  {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  owned_fd(owned_fd const&)            = delete;
  owned_fd& operator=(owned_fd const&) = delete;
  ~owned_fd() { reset(); }

  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] bool valid() const noexcept { return fd_ >= 0; }
  explicit operator bool() const noexcept { return valid(); }
  /// Gives up ownership without closing.
  [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }
  /// Closes the descriptor (if any). Never throws.
  void reset() noexcept;

 private:
  int fd_{-1};
};

}  // namespace gpumem
