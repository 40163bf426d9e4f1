// gpumem/pool/allocation_handle_type.hpp — the kinds of OS handle an IPC-capable pool can be
// exported as, and a set of them (a pool may support several at once).
//
// The values equal cudaMemAllocationHandleType's, so they convert by value; defining our own enum
// keeps the public headers stable across toolkits.
#pragma once

#include <initializer_list>
#include <string>

namespace gpumem::pools {

/// How a pool (and its allocations) may be exported to another process.
enum class allocation_handle_type : unsigned {
  none                  = 0x0,  ///< no export mechanism
  posix_file_descriptor = 0x1,  ///< a file descriptor (POSIX only)
  win32                 = 0x2,  ///< a Win32 NT HANDLE (Windows only)
  win32_kmt             = 0x4,  ///< a Win32 KMT handle (Windows only)
  fabric                = 0x8,  ///< a fabric handle (cudaMemFabricHandle_t; needs IMEX channels)
};

[[nodiscard]] char const* to_string(allocation_handle_type type) noexcept;

/// A set of handle types. Empty means "not IPC-capable" (the `none` type).
/// Invariant: bits() only ever holds the bits given to it (unknown bits are kept so that
/// validation can name them, never silently dropped).
class handle_type_set {
 public:
  constexpr handle_type_set() noexcept = default;
  constexpr handle_type_set(allocation_handle_type type) noexcept  // NOLINT: a set of one
      : bits_{static_cast<unsigned>(type)}
  {
  }
  constexpr handle_type_set(std::initializer_list<allocation_handle_type> types) noexcept
  {
    for (auto t : types) { bits_ |= static_cast<unsigned>(t); }
  }
  [[nodiscard]] static constexpr handle_type_set from_bits(unsigned bits) noexcept
  {
    handle_type_set s;
    s.bits_ = bits;
    return s;
  }

  [[nodiscard]] constexpr unsigned bits() const noexcept { return bits_; }
  [[nodiscard]] constexpr bool empty() const noexcept { return bits_ == 0; }
  /// contains(none) is true only for the empty set.
  [[nodiscard]] constexpr bool contains(allocation_handle_type type) const noexcept
  {
    auto const b = static_cast<unsigned>(type);
    return b == 0 ? empty() : (bits_ & b) == b;
  }
  [[nodiscard]] constexpr bool is_subset_of(handle_type_set other) const noexcept
  {
    return (bits_ & ~other.bits_) == 0;
  }
  [[nodiscard]] constexpr handle_type_set minus(handle_type_set other) const noexcept
  {
    return from_bits(bits_ & ~other.bits_);
  }

  friend constexpr handle_type_set operator|(handle_type_set a, handle_type_set b) noexcept
  {
    return from_bits(a.bits_ | b.bits_);
  }
  friend constexpr bool operator==(handle_type_set, handle_type_set) noexcept = default;

 private:
  unsigned bits_{0};
};

constexpr handle_type_set operator|(allocation_handle_type a, allocation_handle_type b) noexcept
{
  return handle_type_set{a} | handle_type_set{b};
}

/// "{posix_file_descriptor, fabric}", "{none}", unknown bits as "0x10".
[[nodiscard]] std::string to_string(handle_type_set types);

}  // namespace gpumem::pools

// The earlier spellings: each name is also gpumem::<name> (the same entity).
namespace gpumem {
using pools::allocation_handle_type;
using pools::handle_type_set;
using pools::to_string;
using pools::operator|;
}  // namespace gpumem
