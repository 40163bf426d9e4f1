// gpumem/detail/diagnostics/symbolizer.hpp — names code addresses: function, source file and line
// (not API).
//
// The module (executable or shared library) holding an address is found among the loaded ones
// (dl_iterate_phdr). Where the module carries debug information (built with -g) or at least its
// symbol table (not stripped), binutils' addr2line is run on it, without a shell
// (detail::run_program), once for all the new addresses of that module in a call; its answers
// give the function and, with debug information, the file and line, the inlined functions
// included. Elsewhere — a stripped module, or no addr2line installed — the name is the exported
// symbol around the address (dladdr), and the module and offset.
// Every answer is cached for the life of the process, so an address is looked up once; a module
// unloaded and another loaded at the same addresses would be named after the first.
// Thread safety: symbolize() may be called from any thread (one lookup at a time).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpumem::detail {

/// One function of the source at an address: the innermost, or one it was inlined into.
struct source_frame {
  std::string function;  ///< demangled
  std::string file;      ///< as the debug information names it (usually a full path)
  unsigned line{};
};

/// What is known about one code address.
struct code_location {
  std::uintptr_t address{};
  std::string module;       ///< the executable or shared library file; empty: none found
  std::uintptr_t offset{};  ///< the address as the module's file counts it
  std::string symbol;       ///< the exported symbol around it (demangled), or empty
  std::uintptr_t symbol_offset{};
  std::vector<source_frame> source;  ///< innermost first; empty without debug information

  /// "function (file:line)" from debug information (the innermost function); else
  /// "module(symbol+0x1c)" (an exported symbol), "module(function)" (the symbol table) or
  /// "module(+0xca2c4)"; else the bare address.
  [[nodiscard]] std::string text() const;
  /// text(), and after it each function the innermost was inlined into, outward, as
  /// "function (file:line)" (the line in it that the inlined code came from).
  [[nodiscard]] std::vector<std::string> texts() const;
};

/// Names each of `addresses` (in order). Give a return address minus one to name the call.
/// Never throws but std::bad_alloc.
[[nodiscard]] std::vector<code_location> symbolize(std::vector<std::uintptr_t> const& addresses);

}  // namespace gpumem::detail
