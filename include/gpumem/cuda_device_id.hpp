// gpumem/cuda_device_id.hpp — a strong type for a CUDA device ordinal.
#pragma once

#include <compare>
#include <cstdint>

namespace gpumem {

/// A CUDA device ordinal. Trivially copyable; compare by value.
struct cuda_device_id {
  using value_type = int;

  constexpr cuda_device_id() noexcept = default;
  constexpr explicit cuda_device_id(value_type id) noexcept : id_{id} {}

  [[nodiscard]] constexpr value_type value() const noexcept { return id_; }
  friend constexpr bool operator==(cuda_device_id, cuda_device_id) noexcept  = default;
  friend constexpr auto operator<=>(cuda_device_id, cuda_device_id) noexcept = default;

 private:
  value_type id_{0};
};

/// The calling thread's current device (device 0 when the machine has no CUDA device).
[[nodiscard]] cuda_device_id get_current_cuda_device();

/// Number of CUDA devices visible (0 without a GPU or driver).
[[nodiscard]] int get_num_cuda_devices() noexcept;

}  // namespace gpumem
