// The temporary file of an offload to a file. See detail/offload_file.hpp.
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/offload_file.hpp>
#include <gpumem/mr/vmm_pause.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

namespace gpumem::detail {

std::string offload_file::resolve(std::string const& directory)
{
  if (!directory.empty()) { return directory; }
  char const* tmp = std::getenv("TMPDIR");  // NOLINT(concurrency-mt-unsafe): read once per pause
  return tmp != nullptr && *tmp != '\0' ? std::string{tmp} : std::string{"/tmp"};
}

namespace {

/// An unnamed file in `directory`: O_TMPFILE, else a named one unlinked at once. -1 and errno set
/// when neither can be made.
int open_unnamed(std::string const& directory)
{
  int fd = ::open(directory.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)) { return fd; }
  std::string name = directory + "/gpumem-offload-XXXXXX";
  std::vector<char> path(name.begin(), name.end());
  path.push_back('\0');
  fd = ::mkostemp(path.data(), O_CLOEXEC);
  if (fd >= 0) { ::unlink(path.data()); }
  return fd;
}

}  // namespace

void offload_file::create(std::string const& directory, std::size_t bytes)
{
  close();
  directory_   = resolve(directory);
  bytes_       = bytes;
  int const fd = open_unnamed(directory_);
  if (fd < 0) { fail(errno, "create"); }
  fd_ = fd;
  if (bytes == 0) { return; }
  if (::fallocate(fd_, 0, 0, static_cast<off_t>(bytes)) != 0 && errno != EOPNOTSUPP &&
      errno != ENOSYS) {
    int const error = errno;
    close();
    fail(error, "reserve the disk space of");
  }
}

void offload_file::write(void const* src, std::size_t n, std::size_t offset)
{
  auto const* p = static_cast<char const*>(src);
  for (std::size_t done = 0; done < n;) {
    auto const w = ::pwrite(fd_, p + done, n - done, static_cast<off_t>(offset + done));
    if (w < 0 && errno == EINTR) { continue; }
    if (w <= 0) {
      fail(w < 0 ? errno : ENOSPC, format("write ", bytes_str(n), " at offset ", offset, " of"));
    }
    done += static_cast<std::size_t>(w);
  }
}

void offload_file::read(void* dst, std::size_t n, std::size_t offset) const
{
  auto* p = static_cast<char*>(dst);
  for (std::size_t done = 0; done < n;) {
    auto const r = ::pread(fd_, p + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) { continue; }
    if (r <= 0) {
      fail(r < 0 ? errno : EIO, format("read back ", bytes_str(n), " at offset ", offset, " of"));
    }
    done += static_cast<std::size_t>(r);
  }
}

void offload_file::close() noexcept
{
  if (fd_ < 0) { return; }
  (void)::close(fd_);
  fd_ = -1;
}

void offload_file::fail(int error, std::string const& what) const
{
  throw offload_file_error{
      error, user_message(format("vmm_pool_memory_resource: cannot ", what, " the offload file (",
                                 bytes_str(bytes_), ") in directory '", directory_, "'"))};
}

}  // namespace gpumem::detail
