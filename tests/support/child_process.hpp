// Tests that need a second process (IPC): the test executable runs itself again as a child that
// runs one test, told what to do through one environment variable; messages travel as raw bytes.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <utility>
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

/// Starts this executable again running only `test` (a gtest filter), with each `name=value` of
/// `env` added to (or replacing in) the environment; inherited descriptors stay open. Returns the
/// child's pid (-1 when fork failed).
inline pid_t spawn_self(std::string const& test,
                        std::vector<std::pair<std::string, std::string>> const& env)
{
  static std::string const exe = [] {
    std::vector<char> buf(4096);
    auto const n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
    return std::string(buf.data(), n > 0 ? static_cast<std::size_t>(n) : 0);
  }();
  std::string const filter = "--gtest_filter=" + test;
  std::vector<std::string> assignments;
  for (auto const& [name, value] : env) { assignments.push_back(name + "=" + value); }
  std::vector<char*> argv{const_cast<char*>(exe.c_str()), const_cast<char*>(filter.c_str()),
                          nullptr};
  std::vector<char*> envp;
  for (auto& a : assignments) { envp.push_back(a.data()); }
  for (char** e = environ; *e != nullptr; ++e) {
    bool same = false;
    for (auto const& [name, value] : env) {
      same = same || (std::strncmp(*e, name.c_str(), name.size()) == 0 && (*e)[name.size()] == '=');
    }
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

/// The same with one variable.
inline pid_t spawn_self(std::string const& test, char const* env_name, std::string const& env_value)
{
  return spawn_self(test, {{std::string{env_name}, env_value}});
}

}  // namespace gpumem::test
