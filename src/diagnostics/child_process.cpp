// detail::run_program: posix_spawnp with an argument array and a pipe, no shell.
#include <gpumem/detail/diagnostics/child_process.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

extern char** environ;

namespace gpumem::detail {
namespace {

/// Closes a file descriptor when it goes out of scope.
struct fd_closer {
  int fd{-1};
  ~fd_closer()
  {
    if (fd >= 0) { ::close(fd); }
  }
};

/// The actions that give the child /dev/null as input, `out` as output and no error output.
struct child_files {
  posix_spawn_file_actions_t actions{};
  bool ok{};
  explicit child_files(int out)
  {
    ok = posix_spawn_file_actions_init(&actions) == 0;
    if (!ok) { return; }
    ok = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0) == 0 &&
         posix_spawn_file_actions_adddup2(&actions, out, 1) == 0 &&
         posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0) == 0;
  }
  ~child_files() { posix_spawn_file_actions_destroy(&actions); }
  child_files(child_files const&)            = delete;
  child_files& operator=(child_files const&) = delete;
};

/// Everything until end of file on `fd`.
std::string read_all(int fd)
{
  std::string out;
  char buf[65536];
  for (;;) {
    auto const n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      return out;
    }
  }
}

/// Waits for `pid`; true when it exited with status 0. A process that ignores SIGCHLD reaps its
/// children itself (ECHILD): then the output is all there is to go by.
bool exited_cleanly(pid_t pid)
{
  int status = 0;
  for (;;) {
    if (::waitpid(pid, &status, 0) == pid) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
    if (errno == ECHILD) { return true; }
    if (errno != EINTR) { return false; }
  }
}

}  // namespace

std::optional<std::string> run_program(std::vector<std::string> const& argv)
{
  if (argv.empty()) { return std::nullopt; }
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (auto const& a : argv) { args.push_back(const_cast<char*>(a.c_str())); }
  args.push_back(nullptr);

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) { return std::nullopt; }
  fd_closer read_end{fds[0]};
  pid_t pid = 0;
  {
    fd_closer write_end{
        fds[1]};  // the parent's copy closes before reading: EOF when the child ends
    child_files files{fds[1]};
    if (!files.ok ||
        posix_spawnp(&pid, args[0], &files.actions, nullptr, args.data(), environ) != 0) {
      return std::nullopt;
    }
  }
  std::string out;
  try {
    out = read_all(read_end.fd);
  } catch (...) {  // out of memory: the child ends on its closed pipe and is reaped
    ::close(read_end.fd);
    read_end.fd = -1;
    (void)exited_cleanly(pid);
    throw;
  }
  if (!exited_cleanly(pid)) { return std::nullopt; }
  return out;
}

}  // namespace gpumem::detail
