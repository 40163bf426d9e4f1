// gpumem/detail/offload_file.hpp — the temporary file that pause(pause_mode::offload_to_file)
// writes a pool's contents to (not API; detail/vmm_backing.hpp uses it).
//
// The file has no name: it is opened with O_TMPFILE in the directory, or, where the file system
// cannot do that, created there and unlinked at once. Nothing is left behind when the process
// dies; closing the descriptor frees the disk space. Its space is reserved when it is created
// (fallocate, where the file system supports it), so that a full disk is found before a pool has
// given anything back.
//
// Errors: offload_file_error (gpumem/mr/vmm_pause.hpp) naming the directory, the bytes and the
// system's reason. A short read (the file shrank) is an error too.
// Invariant: is_open() == (fd_ >= 0); bytes_ is the size it was created with.
// Thread safety: none (the pool calls it under its grow lock).
#pragma once

#include <cstddef>
#include <string>

namespace gpumem::detail {

class offload_file {
 public:
  offload_file()                               = default;
  offload_file(offload_file const&)            = delete;
  offload_file& operator=(offload_file const&) = delete;
  ~offload_file() { close(); }

  /// Opens a new unnamed file of `bytes` in `directory` (empty: the TMPDIR environment variable,
  /// else /tmp), closing the one open before. Throws offload_file_error (nothing open then).
  void create(std::string const& directory, std::size_t bytes);
  /// Writes [src, src + n) at `offset`. Throws offload_file_error (disk full, I/O error).
  void write(void const* src, std::size_t n, std::size_t offset);
  /// Reads n bytes at `offset` into dst. Throws offload_file_error (I/O error, file too short).
  void read(void* dst, std::size_t n, std::size_t offset) const;
  /// Closes the file (its space is freed). Does nothing when none is open.
  void close() noexcept;
  [[nodiscard]] bool is_open() const noexcept { return fd_ >= 0; }
  /// The directory the file lies in (for messages).
  [[nodiscard]] std::string const& directory() const noexcept { return directory_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  /// The directory an empty `directory` stands for: TMPDIR, else /tmp.
  [[nodiscard]] static std::string resolve(std::string const& directory);

 private:
  /// Throws offload_file_error "cannot <what> the offload file (<bytes>) in directory '<dir>'".
  [[noreturn]] void fail(int error, std::string const& what) const;

  int fd_{-1};
  std::string directory_;
  std::size_t bytes_{};
};

}  // namespace gpumem::detail
