// gpumem/trace/trace_event.hpp — one event of an allocation trace (the logging adaptor's CSV row
// `Thread,Time,Action,Pointer,Size,Stream[,Frames]`) and the trace_error raised by a malformed
// trace.
//
// Frames: the call stack of the event, innermost frame first, frames joined by frame_separator
// ('|'); a '|' inside a frame's text is written as '/' by the writers (frame_text()). Empty: no
// stack recorded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace gpumem::trace {

enum class action : std::uint8_t {
  allocate,          ///< "allocate": Pointer was returned for Size bytes
  free,              ///< "free": Pointer (of Size bytes) was given back
  allocate_failure,  ///< "allocate failure": the request of Size bytes failed (Pointer is 0)
};

[[nodiscard]] char const* to_string(action a) noexcept;

/// One row. Integer fields are kept as written (Pointer and Stream are opaque identities).
struct event {
  std::uint64_t thread{};   ///< the logging thread's id
  std::uint64_t time{};     ///< integer part of the Time column (trace's own unit; order only)
  std::uint64_t pointer{};  ///< address in the traced program
  std::uint64_t size{};     ///< bytes
  std::uint64_t stream{};   ///< the traced stream handle (0 = default stream)
  std::uint64_t line{};     ///< 1-based line of the trace file (set by trace_reader)
  action act{action::allocate};
  std::string frames;  ///< the Frames column (empty when absent)
};

/// Separates the frames of one call stack in the Frames column.
inline constexpr char frame_separator = '|';

/// The longest call stack text (bytes, before CSV quoting) a Frames column carries. Writers (the
/// trace writer, the logging adaptor, `gpumem convert`) cut a longer stack after its last whole
/// frame that fits, innermost frames kept, so that every line they write fits trace_reader's
/// default 1 MiB line buffer even with every byte quoted.
inline constexpr std::size_t max_stack_bytes = std::size_t{256} << 10;

/// `frames` cut to at most max_stack_bytes at a frame boundary (innermost frames kept); the
/// text as it was when it fits.
[[nodiscard]] inline std::string_view cut_stack(std::string_view frames) noexcept
{
  if (frames.size() <= max_stack_bytes) { return frames; }
  auto const last = frames.rfind(frame_separator, max_stack_bytes);
  return frames.substr(0, last == std::string_view::npos ? max_stack_bytes : last);
}

/// `frame` as one frame of a Frames column: separators and line breaks become '/' and ' '.
[[nodiscard]] inline std::string frame_text(std::string_view frame)
{
  std::string out{frame};
  for (char& c : out) {
    if (c == frame_separator) { c = '/'; }
    if (c == '\n' || c == '\r') { c = ' '; }
  }
  return out;
}

/// A trace could not be read: names the file, the 1-based line and what was expected.
class trace_error : public std::runtime_error {
 public:
  trace_error(std::string const& file, std::size_t line, std::string const& what);
  [[nodiscard]] std::string const& file() const noexcept { return file_; }
  [[nodiscard]] std::size_t line() const noexcept { return line_; }

 private:
  std::string file_;
  std::size_t line_;
};

}  // namespace gpumem::trace
