// tools/gpumem/closest_name.hpp — "did you mean ...?": the defined name closest to a mistyped word.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace gpumem::tool {

/// Edits that turn `a` into `b`: insertions, deletions, substitutions and swaps of two neighbours.
[[nodiscard]] std::size_t edit_distance(std::string_view a, std::string_view b);

/// The name of `names` that `word` most likely meant, or "" when none is close: the first name at
/// the fewest edits, if those are at most a quarter of the word (leading dashes not counted), else
/// the first name that the word abbreviates (--sim: --simulate) or extends (--report-dir:
/// --report).
[[nodiscard]] std::string closest_name(std::string_view word,
                                       std::vector<std::string> const& names);

}  // namespace gpumem::tool
