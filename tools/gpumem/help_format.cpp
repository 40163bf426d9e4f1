// The --help look of help_format.hpp.
#include "help_format.hpp"

#include <sstream>

namespace gpumem::tool {

help_format::help_format()
{
  column_width(26);
  label("SUBCOMMAND", "COMMAND");
  label("Subcommands", "Commands");
  label("Positionals", "Arguments");
}

std::string help_format::make_option_name(CLI::Option const* opt, bool is_positional) const
{
  if (is_positional) { return opt->get_name(true, false); }
  std::vector<std::string> names;
  for (auto const& n : opt->get_snames()) { names.push_back("-" + n); }
  for (auto const& n : opt->get_lnames()) { names.push_back("--" + n); }
  return CLI::detail::join(names, ", ");
}

std::string help_format::make_option_opts(CLI::Option const* opt) const
{
  if (!opt->get_option_text().empty()) { return " " + opt->get_option_text(); }
  if (opt->get_type_size() == 0 || opt->get_type_name().empty()) { return {}; }
  return " " + opt->get_type_name();
}

std::string help_format::make_option_desc(CLI::Option const* opt) const
{
  auto const& excluded = opt->get_excludes();
  if (excluded.empty()) { return opt->get_description(); }
  std::vector<std::string> names;
  for (auto const* other : excluded) { names.push_back(other->get_name()); }
  std::sort(names.begin(), names.end());
  return opt->get_description() + "\n(not with " + CLI::detail::join(names, ", ") + ")";
}

std::string help_format::make_description(CLI::App const* app) const
{
  auto const& text = app->get_description();
  return text.empty() ? std::string{} : text + "\n\n";
}

std::string help_format::make_subcommand(CLI::App const* sub) const
{
  auto const& text = sub->get_description();
  std::ostringstream out;
  CLI::detail::format_help(out, sub->get_name(), text.substr(0, text.find('\n')), column_width_);
  return out.str();
}

}  // namespace gpumem::tool
