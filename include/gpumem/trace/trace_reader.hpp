// gpumem/trace/trace_reader.hpp — streams an allocation trace (the logging adaptor's CSV).
//
// Format: an optional header line `Thread,Time,Action,Pointer,Size,Stream`, then one event per
// line. Thread, Time, Size: decimal; Time may carry a fraction (`12.5`) or clock form
// (`10:01:02.25`), only its leading integer is kept. Pointer, Stream: hex with `0x` or decimal.
// Action: `allocate`, `free` or `allocate failure`. Blank lines and `\r` are ignored.
// The header decides whether rows have a 7th column: with `...,Stream,Frames` each row may carry
// the event's call stack (see trace_event.hpp), as a CSV field (quoted when it holds a comma or a
// quote, `""` for a quote) or left out; without a header, or with the 6-column one, rows have 6.
//
// Memory: one fixed buffer (buffer_bytes), whatever the trace length. Parsing is hand-written over
// that buffer (no iostreams, no per-field allocation).
// Errors: a file that cannot be opened or a malformed line throws trace_error naming the file, the
// line number and what was expected there. A malformed last line without a newline is what a
// program that crashed while logging leaves: it ends the trace instead, and truncated_line() says
// which line was skipped.
// Thread safety: none (one reader per thread).
#pragma once

#include <gpumem/trace/trace_event.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace gpumem::trace {

struct trace_reader_options {
  std::size_t buffer_bytes{std::size_t{1} << 20};  ///< read block; a line must fit in it
};

class trace_reader {
 public:
  /// Opens `path`; throws trace_error when it cannot be opened.
  explicit trace_reader(std::string path, trace_reader_options options = {});
  ~trace_reader();
  trace_reader(trace_reader const&)            = delete;
  trace_reader& operator=(trace_reader const&) = delete;

  /// The next event into `out`; false at the end of the trace.
  bool next(event& out);
  /// Up to out.size() events; returns how many (0 only at the end).
  std::size_t read(std::span<event> out);
  /// Back to the first event.
  void rewind();

  [[nodiscard]] std::string const& path() const noexcept { return path_; }
  /// 1-based number of the line last parsed.
  [[nodiscard]] std::size_t line() const noexcept { return line_; }
  /// Total bytes of the file.
  [[nodiscard]] std::size_t file_bytes() const noexcept { return file_bytes_; }
  /// Bytes consumed so far (for progress).
  [[nodiscard]] std::size_t bytes_read() const noexcept { return consumed_; }
  /// The number of the cut-off last line that was skipped; 0 when there was none.
  [[nodiscard]] std::size_t truncated_line() const noexcept { return truncated_line_; }

 private:
  bool refill();
  bool next_line(char const*& begin, char const*& end);
  void parse(char const* begin, char const* end, event& out) const;

  std::string path_;
  int fd_{-1};
  std::vector<char> buffer_;
  std::size_t pos_{};    ///< first unparsed byte in buffer_
  std::size_t limit_{};  ///< bytes valid in buffer_
  bool eof_{};
  bool terminated_{};     ///< the line last returned by next_line ended with a newline
  bool frames_column_{};  ///< the header names the Frames column
  std::size_t truncated_line_{};
  std::size_t line_{};
  std::size_t file_bytes_{};
  std::size_t consumed_{};
};

/// Reads every event of a (small) trace into memory; for tests and tools on small traces.
[[nodiscard]] std::vector<event> read_all(std::string const& path);

}  // namespace gpumem::trace
