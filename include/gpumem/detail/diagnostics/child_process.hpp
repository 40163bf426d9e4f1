// gpumem/detail/diagnostics/child_process.hpp — runs a program and reads what it prints (not API).
//
// No shell: the program gets its arguments as they are (spaces, quotes, '$', line breaks and all)
// and is found on PATH like execvp does. Its standard input is /dev/null and its error output is
// discarded. Thread safety: each call is independent (the pipe is close-on-exec, so a program
// started by another thread at the same time does not inherit it).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace gpumem::detail {

/// Runs `argv[0]` with the arguments `argv` and returns its standard output, or nullopt when it
/// could not be started or did not exit with status 0. Blocks until it exits. Never throws but
/// std::bad_alloc.
[[nodiscard]] std::optional<std::string> run_program(std::vector<std::string> const& argv);

}  // namespace gpumem::detail
