// tools/gpumem/option_values.hpp — what an option's value must be: CLI11 validators that refuse a
// bad value with a message naming the value and what to give instead. CLI11 puts the option's
// name in front ("--events: '-1' is not a count ...").
#pragma once

#include <CLI/CLI.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gpumem::tool {

/// A command-line word as a message repeats it: at most 80 bytes, then "..." and its size.
[[nodiscard]] std::string shown(std::string const& word);

/// Whether `word` reads as a size (4096, 16GiB, max).
[[nodiscard]] bool looks_like_size(std::string const& word);

/// A size (4096, 256KiB, 1.5GiB, 80GB) from `least` to `most` bytes.
[[nodiscard]] CLI::Validator size_between(std::size_t least, std::size_t most);

/// A whole number from `least` to `most`: digits only (no sign, no spaces), no overflow. A
/// transform (`->transform`): it rewrites the value without leading zeros, so that CLI11, which
/// reads "010" as octal, gets ten.
[[nodiscard]] CLI::Validator count_between(std::uint64_t least, std::uint64_t most);

/// One of `names` (a `kind` such as "workload"); the message lists them and the closest one.
[[nodiscard]] CLI::Validator one_of(std::string kind, std::vector<std::string> names);

/// Anything but the empty word; the message asks for `what` ("a folder").
[[nodiscard]] CLI::Validator not_empty(std::string what);

}  // namespace gpumem::tool
