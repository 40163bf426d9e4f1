// gpumem/trace/trace_writer.hpp — writes events in the logging adaptor's CSV format, so that what
// trace_reader reads back is what was written. Buffered; flushes on flush() and destruction.
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
  /// Creates (truncates) `path` and writes the header line.
  explicit trace_writer(std::string path);
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
};

/// The header line, without the newline.
inline constexpr char const* csv_header = "Thread,Time,Action,Pointer,Size,Stream";

}  // namespace gpumem::trace
