// src/spec/shown.hpp — user text inside a message, bounded (internal to the spec parser).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace gpumem::spec::detail_shown {

/// The most bytes of user text a message repeats.
inline constexpr std::size_t shown_bytes = 80;

/// `text` as a message repeats it: whole up to shown_bytes, else its start, "..." and its size
/// (a spec of a megabyte is not echoed whole).
[[nodiscard]] inline std::string shown(std::string_view text)
{
  if (text.size() <= shown_bytes) { return std::string{text}; }
  return std::string{text.substr(0, shown_bytes)} + "... (" + std::to_string(text.size()) +
         " bytes)";
}

}  // namespace gpumem::spec::detail_shown
