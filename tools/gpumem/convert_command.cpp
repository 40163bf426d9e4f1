// `gpumem convert`: a PyTorch memory snapshot (pickle) to the CSV trace, by snapshot_to_csv.py.
#include "checked_output.hpp"
#include "commands.hpp"
#include "installed_script.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <filesystem>
#include <iostream>
#include <vector>

#ifndef GPUMEM_TOOL_CONVERTER
#define GPUMEM_TOOL_CONVERTER "snapshot_to_csv.py"
#endif

namespace gpumem::tool {
namespace {

/// The converter: beside the binary when installed, else the build tree's copy.
std::string converter_path()
{
  return installed_script("snapshot_to_csv.py", GPUMEM_TOOL_CONVERTER);
}

}  // namespace

int run_convert(std::string const& snapshot, std::string const& csv, std::string const& device,
                std::string const& python)
{
  auto const script = converter_path();
  checked_output out{csv, {snapshot}};  // the converter writes a temporary; kept only on success
  out.close_stream();
  std::vector<std::string> args{python,     script, snapshot, "-o", out.writing_path(),
                                "--device", device, "--name", csv};
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args) { argv.push_back(a.data()); }
  argv.push_back(nullptr);
  pid_t const pid = ::fork();
  if (pid == 0) {
    ::execvp(argv[0], argv.data());
    std::cerr << "gpumem convert: cannot run " << python << " ("
              << std::generic_category().message(errno)
              << "); install Python 3 or pass --python PATH\n";
    ::_exit(127);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) < 0) {
    std::cerr << "gpumem convert: cannot start " << python << "\n";
    return 1;
  }
  int const rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  if (rc == 0) { out.commit(); }
  return rc;
}

}  // namespace gpumem::tool
