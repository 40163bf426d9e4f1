// tools/gpumem/help_format.hpp — how `gpumem --help` looks: CLI11's formatter with option names as
// written (-r, --resource), conflicts as "(not with --csv)" under the option, and one line per
// command in the list of commands (a command's own --help shows its whole description).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace gpumem::tool {

class help_format : public CLI::Formatter {
 public:
  help_format();
  std::string make_option_name(CLI::Option const* opt, bool is_positional) const override;
  std::string make_option_opts(CLI::Option const* opt) const override;
  std::string make_option_desc(CLI::Option const* opt) const override;
  std::string make_description(CLI::App const* app) const override;
  std::string make_subcommand(CLI::App const* sub) const override;
};

}  // namespace gpumem::tool
