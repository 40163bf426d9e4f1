// checked_output: refuse inputs as outputs, write to a temporary, rename on success.
#include "checked_output.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace gpumem::tool {
namespace fs = std::filesystem;
namespace {

bool same_file(std::string const& a, std::string const& b)
{
  if (a == b) { return true; }
  std::error_code ec;
  return fs::equivalent(a, b, ec) && !ec;
}

/// A name beside `path` that no other file has: path.gpumem-tmp-PID-N.
std::string temporary_beside(std::string const& path)
{
  static unsigned counter = 0;
  return path + ".gpumem-tmp-" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
}

}  // namespace

void refuse_input_as_output(std::string const& output, std::vector<std::string> const& inputs)
{
  for (auto const& in : inputs) {
    if (same_file(output, in)) {
      throw output_error{"refusing to write " + output + ": it is also an input (" + in +
                         "); choose another output file"};
    }
  }
}

checked_output::checked_output(std::string path, std::vector<std::string> const& inputs)
    : path_{std::move(path)}
{
  if (path_.empty()) { throw output_error{"an output file name is empty"}; }
  refuse_input_as_output(path_, inputs);
  std::error_code ec;
  auto const st = fs::status(path_, ec);
  in_place_     = fs::exists(st) && !fs::is_regular_file(st);
  if (fs::is_directory(st)) { throw output_error{"cannot write " + path_ + ": it is a folder"}; }
  writing_ = in_place_ ? path_ : temporary_beside(path_);
  file_.open(writing_, std::ios::out | std::ios::trunc | std::ios::binary);
  if (!file_.is_open()) {
    throw output_error{"cannot create " + (in_place_ ? path_ : "a file beside " + path_) + ": " +
                       std::strerror(errno)};
  }
}

checked_output::~checked_output()
{
  if (committed_ || in_place_) { return; }
  file_.close();
  std::error_code ec;
  fs::remove(writing_, ec);
}

void checked_output::close_stream()
{
  file_.close();
}

void checked_output::fail(std::string const& why)
{
  int const err = errno;
  file_.close();
  if (!in_place_) {
    std::error_code ec;
    fs::remove(writing_, ec);
  }
  committed_ = true;  // nothing left to clean up
  throw output_error{"cannot write " + path_ + ": " + why +
                     (err != 0 ? std::string{" ("} + std::strerror(err) + ")" : "") +
                     (in_place_ ? "" : "; the file was left as it was")};
}

void checked_output::commit()
{
  errno = 0;
  if (file_.is_open()) {
    file_.flush();
    if (!file_) { fail("a write failed (is the disk full?)"); }
    file_.close();
    if (file_.fail()) { fail("closing the file failed (is the disk full?)"); }
  }
  if (!in_place_ && std::rename(writing_.c_str(), path_.c_str()) != 0) {
    fail("cannot move the finished file into place");
  }
  committed_ = true;
}

}  // namespace gpumem::tool
