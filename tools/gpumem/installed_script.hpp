// tools/gpumem/installed_script.hpp — where a Python script the tool runs lives: beside the
// binary or in ../share/gpumem when installed, else the build tree's copy.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

namespace gpumem::tool {

inline std::string installed_script(char const* name, char const* build_tree_copy)
{
  std::error_code ec;
  auto const self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (auto const& c :
         {self.parent_path() / name, self.parent_path() / "../share/gpumem" / name}) {
      if (std::filesystem::exists(c)) { return c.string(); }
    }
  }
  return build_tree_copy;
}

}  // namespace gpumem::tool
