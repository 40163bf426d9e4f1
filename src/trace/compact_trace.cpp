// The profiled trace in a temporary binary file.
#include <gpumem/trace/compact_trace.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <stdexcept>
#include <string>

namespace gpumem::trace {
namespace {

/// $TMPDIR, else /tmp.
std::string temp_folder()
{
  char const* dir = std::getenv("TMPDIR");  // NOLINT(concurrency-mt-unsafe)
  return dir != nullptr && *dir != '\0' ? dir : "/tmp";
}

[[noreturn]] void io_failure(char const* what)
{
  throw std::runtime_error{std::string{"gpumem trace cache: cannot "} + what +
                           " the temporary file in " + temp_folder() + ": " +
                           std::generic_category().message(errno) +
                           " (set TMPDIR to a folder with free space)"};
}

/// An anonymous file in temp_folder(): created, then unlinked at once (gone when closed).
std::FILE* anonymous_file()
{
  auto name    = temp_folder() + "/gpumem-trace-XXXXXX";
  int const fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) { return nullptr; }
  ::unlink(name.c_str());
  std::FILE* f = ::fdopen(fd, "w+b");
  if (f == nullptr) { ::close(fd); }
  return f;
}

}  // namespace

compact_trace::compact_trace() : file_{anonymous_file()}
{
  if (file_ == nullptr) { io_failure("create"); }
  buffer_.reserve(capacity);
}

compact_trace::~compact_trace()
{
  std::fclose(file_);
}

void compact_trace::spill()
{
  if (!buffer_.empty() &&
      std::fwrite(buffer_.data(), sizeof(compact_event), buffer_.size(), file_) != buffer_.size()) {
    io_failure("write");
  }
  count_ += buffer_.size();
  buffer_.clear();
}

void compact_trace::append(std::span<compact_event const> events)
{
  if (events.size() < capacity - buffer_.size()) {
    buffer_.insert(buffer_.end(), events.begin(), events.end());
    return;
  }
  spill();
  if (std::fwrite(events.data(), sizeof(compact_event), events.size(), file_) != events.size()) {
    io_failure("write");
  }
  count_ += events.size();
}

void compact_trace::finish()
{
  spill();
  if (std::fflush(file_) != 0) { io_failure("write"); }
  rewind();
}

void compact_trace::rewind()
{
  std::rewind(file_);
}

std::size_t compact_trace::read(std::span<compact_event> out)
{
  auto const n = std::fread(out.data(), sizeof(compact_event), out.size(), file_);
  if (n < out.size() && std::ferror(file_) != 0) { io_failure("read"); }
  return n;
}

}  // namespace gpumem::trace
