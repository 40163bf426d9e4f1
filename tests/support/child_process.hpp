// Tests that need a second process (IPC): the test executable runs itself again as a child that
// runs one test, told what to do through one environment variable; messages travel as raw bytes.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <vector>

extern char** environ;

namespace gpumem::test {

/// A trivially copyable message as bytes, to send or to receive into.
template <class T>
std::span<std::byte const> bytes_of(T const& t)
{
  return {reinterpret_cast<std::byte const*>(&t), sizeof t};
}
template <class T>
std::span<std::byte> bytes_of(T& t)
{
  return {reinterpret_cast<std::byte*>(&t), sizeof t};
}

/// Starts this executable again running only `test` (a gtest filter), with `env_name=env_value`
/// added to (or replacing in) the environment; inherited descriptors stay open. Returns the
/// child's pid (-1 when fork failed).
inline pid_t spawn_self(std::string const& test, char const* env_name, std::string const& env_value)
{
  static std::string const exe = [] {
    std::vector<char> buf(4096);
    auto const n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
    return std::string(buf.data(), n > 0 ? static_cast<std::size_t>(n) : 0);
  }();
  std::string const filter = "--gtest_filter=" + test;
  std::string const env    = std::string{env_name} + "=" + env_value;
  std::vector<char*> argv{const_cast<char*>(exe.c_str()), const_cast<char*>(filter.c_str()),
                          nullptr};
  std::vector<char*> envp{const_cast<char*>(env.c_str())};
  auto const name_len = std::strlen(env_name);
  for (char** e = environ; *e != nullptr; ++e) {
    bool const same = std::strncmp(*e, env_name, name_len) == 0 && (*e)[name_len] == '=';
    if (!same) { envp.push_back(*e); }
  }
  envp.push_back(nullptr);
  pid_t const pid = ::fork();
  if (pid == 0) {
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

}  // namespace gpumem::test
