// gpumem/trace/trace_writer.hpp — writes events in the logging adaptor's CSV format, so that what
// trace_reader reads back is what was written. Buffered; flushes on flush() and destruction.
// With `frames`, the header names a 7th column, Frames, and each row carries event::frames (quoted
// as CSV when it holds a comma or a quote).
// Errors: a file that cannot be created or written throws trace_error (write(), flush() or close();
// the destructor closes without checking).
// Thread safety: none.
#pragma once

#include <gpumem/trace/trace_event.hpp>

#include <cstdio>
#include <string>

namespace gpumem::trace {

class trace_writer {
 public:
  /// Creates (truncates) `path` and writes the header line (with the Frames column: `frames`).
  explicit trace_writer(std::string path, bool frames = false);
  ~trace_writer();
  trace_writer(trace_writer const&)            = delete;
  trace_writer& operator=(trace_writer const&) = delete;

  void write(event const& e);
  void flush();
  /// Flushes and closes the file, checking both (a full disk is found here at the latest).
  void close();

 private:
  std::string path_;
  std::FILE* file_{};
  bool frames_{};
};

/// The header line, without the newline.
inline constexpr char const* csv_header = "Thread,Time,Action,Pointer,Size,Stream";
/// The header line of a trace with call stacks, without the newline.
inline constexpr char const* csv_frames_header = "Thread,Time,Action,Pointer,Size,Stream,Frames";

/// A Frames column's text as one CSV field: quoted (a quote doubled) when it holds a comma or a
/// quote, else as it is.
/// (cut to max_stack_bytes at a frame boundary first: see cut_stack()).
[[nodiscard]] std::string frames_field(std::string const& frames);

}  // namespace gpumem::trace
