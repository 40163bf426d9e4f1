// tools/gpumem/checked_output.hpp — every file the tool writes goes through here, so that no
// output can destroy an input or leave a half-written file behind.
//
// A checked_output refuses a path that names one of the command's inputs (the same file by path,
// link or hard link), writes a regular file to a temporary beside it and renames that over the
// target only when every write and the close succeeded (a failure leaves an existing file as it
// was). A symbolic link is written through: the temporary goes beside the file at the end of the
// link and replaces that file, never the link (a link to nothing is refused). A target that
// exists and is not a regular file (a terminal, a pipe, a device, /dev/null, or /dev/stdout
// where it leads to one) is written in place, never replaced, with every write still checked.
// Errors: output_error naming the path and the reason; the temporary is removed.
// Thread safety: none.
#pragma once

#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpumem::tool {

/// A file the tool could not write; main() prints it and exits with status 1.
struct output_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Throws output_error when `output` is the same file as one of `inputs`.
void refuse_input_as_output(std::string const& output, std::vector<std::string> const& inputs);

class checked_output {
 public:
  /// Checks `path` against `inputs`, then opens the temporary (or the special file).
  checked_output(std::string path, std::vector<std::string> const& inputs);
  /// Removes the temporary unless commit() succeeded; never throws.
  ~checked_output();
  checked_output(checked_output const&)            = delete;
  checked_output& operator=(checked_output const&) = delete;

  /// Where to write; failures are found by commit().
  [[nodiscard]] std::ostream& stream() { return file_; }
  /// The file being written (the temporary, or the target itself when it is special), for a
  /// writer of its own (another program); call close_stream() first.
  [[nodiscard]] std::string const& writing_path() const { return writing_; }
  /// Closes the stream without committing (another writer takes over writing_path()).
  void close_stream();
  /// Flushes and closes, checking both, then renames the temporary over the target.
  void commit();

 private:
  [[noreturn]] void fail(std::string const& why);

  std::string path_;
  std::string target_;   ///< path_, or the file a symbolic link path_ points to
  std::string writing_;  ///< path_ + a unique suffix, or path_ for a special file
  std::ofstream file_;
  bool in_place_{};
  bool committed_{};
};

}  // namespace gpumem::tool
