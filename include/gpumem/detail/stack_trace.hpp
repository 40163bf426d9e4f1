// gpumem/detail/stack_trace.hpp — the call stack at the point of construction (not API).
//
// Captured with glibc's backtrace() (return addresses only: cheap); symbol names are resolved
// only when printed, with backtrace_symbols(). Symbols of the executable itself need -rdynamic
// at link time; without it frames show as module+offset.
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

  /// The frames' symbols (demangled), innermost first, joined by `separator` on one line: a
  /// `separator` inside a symbol becomes '/', a line break a space (a trace's Frames column).
  [[nodiscard]] std::string joined(char separator) const;

  /// One line per frame: "  #<i> <symbol>", innermost (the caller of the constructor) first.
  friend std::ostream& operator<<(std::ostream& os, stack_trace const& trace);

 private:
  std::vector<void*> frames_;
};

}  // namespace gpumem::detail
