// gpumem/detail/format.hpp — small message helpers for diagnostics (not API).
#pragma once

#include <cstddef>
#include <sstream>
#include <string>

namespace gpumem::detail {

/// Concatenates its arguments with operator<< into a string.
template <typename... Args>
[[nodiscard]] std::string format(Args const&... args)
{
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

/// "1.50 GiB (1610612736 B)" — a byte count for people, exact value kept.
[[nodiscard]] std::string bytes_str(std::size_t bytes);

/// "0x7f5be0000000"
[[nodiscard]] std::string ptr_str(void const* ptr);

}  // namespace gpumem::detail
