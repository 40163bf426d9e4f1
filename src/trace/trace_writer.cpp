// CSV trace writer (the format trace_reader reads).
#include <gpumem/detail/format.hpp>
#include <gpumem/trace/trace_writer.hpp>

#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <system_error>
#include <utility>

namespace gpumem::trace {

std::string frames_field(std::string const& whole)
{
  auto const frames = cut_stack(whole);  // a line the reader accepts
  bool const quote  = frames.find_first_of(",\"") != std::string_view::npos;
  std::string out   = quote ? "\"" : "";
  for (char c : frames) {
    if (c == '"') { out += '"'; }
    out += c == '\n' || c == '\r' ? ' ' : c;  // a field never spans lines
  }
  if (!quote) { return out; }
  return out + "\"";
}

trace_writer::trace_writer(std::string path, bool frames) : path_{std::move(path)}, frames_{frames}
{
  file_ = std::fopen(path_.c_str(), "w");
  if (file_ == nullptr) {
    throw trace_error{
        path_, 0,
        detail::format("cannot create the trace: ", std::generic_category().message(errno))};
  }
  std::fprintf(file_, "%s\n", frames_ ? csv_frames_header : csv_header);
}

trace_writer::~trace_writer()
{
  if (file_ != nullptr) { std::fclose(file_); }
}

void trace_writer::write(event const& e)
{
  int n = std::fprintf(file_, "%" PRIu64 ",%" PRIu64 ",%s,0x%" PRIx64 ",%" PRIu64 ",%" PRIu64,
                       e.thread, e.time, to_string(e.act), e.pointer, e.size, e.stream);
  if (n >= 0 && frames_) { n = std::fprintf(file_, ",%s", frames_field(e.frames).c_str()); }
  if (n >= 0) { n = std::fputc('\n', file_); }
  if (n < 0) {
    throw trace_error{path_, 0,
                      detail::format("write failed: ", std::generic_category().message(errno))};
  }
}

void trace_writer::flush()
{
  if (std::fflush(file_) != 0) {
    throw trace_error{path_, 0,
                      detail::format("write failed: ", std::generic_category().message(errno))};
  }
}

void trace_writer::close()
{
  flush();
  std::FILE* f = std::exchange(file_, nullptr);
  if (std::fclose(f) != 0) {
    throw trace_error{path_, 0,
                      detail::format("closing failed: ", std::generic_category().message(errno))};
  }
}

}  // namespace gpumem::trace
