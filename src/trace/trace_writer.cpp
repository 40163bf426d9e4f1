// CSV trace writer (the format trace_reader reads).
#include <gpumem/detail/format.hpp>
#include <gpumem/trace/trace_writer.hpp>

#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <system_error>
#include <utility>

namespace gpumem::trace {

trace_writer::trace_writer(std::string path) : path_{std::move(path)}
{
  file_ = std::fopen(path_.c_str(), "w");
  if (file_ == nullptr) {
    throw trace_error{
        path_, 0,
        detail::format("cannot create the trace: ", std::generic_category().message(errno))};
  }
  std::fprintf(file_, "%s\n", csv_header);
}

trace_writer::~trace_writer()
{
  if (file_ != nullptr) { std::fclose(file_); }
}

void trace_writer::write(event const& e)
{
  int const n =
      std::fprintf(file_, "%" PRIu64 ",%" PRIu64 ",%s,0x%" PRIx64 ",%" PRIu64 ",%" PRIu64 "\n",
                   e.thread, e.time, to_string(e.act), e.pointer, e.size, e.stream);
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
