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

/// Whether `path`, or a link on its way to a file, is a process's open file (/dev/stdout,
/// /dev/fd/N, /proc/self/fd/N): written in place, so that what the shell opened (a redirection,
/// `>>` included) receives the output.
bool is_open_file_alias(std::string const& path)
{
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  for (int step = 0; step < 40; ++step) {
    auto const where = p.lexically_normal().string();
    for (char const* alias : {"/dev/stdout", "/dev/stderr", "/dev/fd/", "/proc/"}) {
      if (where.rfind(alias, 0) == 0) { return true; }
    }
    if (!fs::is_symlink(fs::symlink_status(p, ec))) { return false; }
    auto const next = fs::read_symlink(p, ec);
    if (ec) { return false; }
    p = next.is_absolute() ? next : p.parent_path() / next;
  }
  return false;
}

/// The file that `path` names: `path` itself, or for a symbolic link the file at the end of
/// its chain, so that the finished file replaces the link's target and the link stays a link.
/// A link to nothing is refused (a new file would land wherever the link points).
std::string link_target(std::string const& path)
{
  std::error_code ec;
  if (!fs::is_symlink(fs::symlink_status(path, ec))) { return path; }
  auto target = fs::canonical(path, ec);
  if (ec) {
    throw output_error{"cannot write " + path +
                       ": it is a symbolic link to a file that does not exist; give the "
                       "target's path instead"};
  }
  return target.string();
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
  if (fs::is_directory(st)) { throw output_error{"cannot write " + path_ + ": it is a folder"}; }
  in_place_ = fs::exists(st) && (!fs::is_regular_file(st) || is_open_file_alias(path_));
  target_   = in_place_ ? path_ : link_target(path_);
  writing_  = in_place_ ? path_ : temporary_beside(target_);
  // In place: appended, so that a file the shell opened (`>` or `>>`) is not cut short again.
  file_.open(writing_,
             (in_place_ ? std::ios::app : std::ios::trunc) | std::ios::out | std::ios::binary);
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
  if (!in_place_ && std::rename(writing_.c_str(), target_.c_str()) != 0) {
    fail("cannot move the finished file into place");
  }
  committed_ = true;
}

}  // namespace gpumem::tool
