// tools/gpumem/usage.hpp — command lines the tool refuses before any work: words CLI11 would
// misread (an empty `--opt=`), and words left over after parsing (unknown options and commands,
// one word too many), each with what was wrong and, where one is close, the name that was meant.
#pragma once

#include <CLI/CLI.hpp>

#include <stdexcept>
#include <string>
#include <vector>

namespace gpumem::tool {

/// Thrown for bad command lines; main prints it with the command's --help hint and exits 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The words as CLI11 should read them: `--simulate SIZE` becomes `--simulate=SIZE` when SIZE reads
/// as a size and names no file (--simulate takes its value only after '='; a lone --simulate is
/// the default capacity). Throws usage_error for `--opt=` with nothing after '=' (CLI11 would take
/// the next word as the value). Words after `--` are left alone.
[[nodiscard]] std::vector<std::string> prepare_words(std::vector<std::string> words);

/// Throws usage_error for the first word that `app` (parsed with allow_extras) left over: an
/// unknown option of `app` or an unknown command, with the closest defined one, or an argument too
/// many for `command` (the command given; CLI11 hands a word after `--` that the command does not
/// take back to the root).
void refuse_leftovers(CLI::App const& app, CLI::App const& command);

/// CLI11's message for a command line it refused, said the way the tool's other messages are
/// ("--report needs a value (DIR)" for "--report: 1 required DIR missing"); `app` is the command
/// that was being parsed. Messages of other shapes are kept as CLI11 wrote them.
[[nodiscard]] std::string usage_message(CLI::ParseError const& error, CLI::App const& app);

/// "gpumem" or "gpumem COMMAND": how messages name the (sub)command `app`.
[[nodiscard]] std::string command_name(CLI::App const& app);

}  // namespace gpumem::tool
