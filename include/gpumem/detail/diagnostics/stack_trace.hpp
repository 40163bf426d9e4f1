// gpumem/detail/diagnostics/stack_trace.hpp — the call stack at the point of construction (not
// API).
//
// Captured with glibc's backtrace() (return addresses only: cheap); frames are named only when
// printed, by detail::symbolize (symbolizer.hpp): "function (file:line)" where the module has
// debug information and addr2line is installed, else "module(symbol+0x1c)" or "module(+0xca2c4)".
// Each address is named once per process (cached), so printing a stack seen before is cheap.
// Thread safety: a captured trace is immutable; printing is thread-safe.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace gpumem::detail {

class stack_trace {
 public:
  /// Captures the calling thread's stack, up to `max_frames` frames.
  explicit stack_trace(int max_frames = 64);

  [[nodiscard]] std::vector<void*> const& frames() const noexcept { return frames_; }

  /// Each frame named, innermost (the caller of the constructor) first; a frame whose code was
  /// inlined gives one entry per function, the inlined one first (as a debugger shows them).
  [[nodiscard]] std::vector<std::string> symbols() const;

  /// symbols(), innermost first, joined by `separator` on one line: a
  /// `separator` inside a symbol becomes '/', a line break a space (a trace's Frames column).
  [[nodiscard]] std::string joined(char separator) const;

  /// One line per frame: "  #<i> <symbol>", innermost (the caller of the constructor) first.
  friend std::ostream& operator<<(std::ostream& os, stack_trace const& trace);

 private:
  std::vector<void*> frames_;
};

}  // namespace gpumem::detail
