// The refusals of usage.hpp.
#include "usage.hpp"

#include "closest_name.hpp"
#include "option_values.hpp"

#include <filesystem>
#include <optional>
#include <string_view>
#include <utility>

namespace gpumem::tool {
namespace {

/// The option names `app` defines, as written on a command line (--resource, -r).
std::vector<std::string> option_names(CLI::App const& app)
{
  std::vector<std::string> names;
  for (auto const* opt : app.get_options()) {
    for (auto const& n : opt->get_lnames()) { names.push_back("--" + n); }
    for (auto const& n : opt->get_snames()) { names.push_back("-" + n); }
  }
  return names;
}

std::vector<std::string> command_names(CLI::App const& app)
{
  std::vector<std::string> names;
  for (auto const* sub : app.get_subcommands([](CLI::App const*) { return true; })) {
    names.push_back(sub->get_name());
  }
  return names;
}

std::string did_you_mean(std::string const& word, std::vector<std::string> const& names)
{
  auto const guess = closest_name(word, names);
  return guess.empty() ? std::string{} : "; did you mean " + guess + "?";
}

[[noreturn]] void unknown_option(CLI::App const& app, std::string const& word)
{
  auto const name = word.substr(0, word.find('='));
  throw usage_error{"unknown option '" + shown(name) + "' for '" + command_name(app) + "'" +
                    did_you_mean(name, option_names(app))};
}

[[noreturn]] void unknown_command(CLI::App const& app, std::string const& word)
{
  auto const names = command_names(app);
  throw usage_error{"unknown command '" + shown(word) + "'" + did_you_mean(word, names) +
                    " (the commands are " + CLI::detail::join(names, ", ") + ")"};
}

/// The text before and after the first `mark` in `text`, if it holds one.
std::optional<std::pair<std::string, std::string>> split_at(std::string const& text,
                                                            std::string_view mark)
{
  auto const at = text.find(mark);
  if (at == std::string::npos) { return std::nullopt; }
  return std::pair{text.substr(0, at), text.substr(at + mark.size())};
}

/// "gpumem synth [OPTIONS] OUT": the usage line of `app`'s --help.
std::string usage_line(CLI::App const& app)
{
  auto const formatter = std::dynamic_pointer_cast<CLI::Formatter>(app.get_formatter());
  if (formatter == nullptr) { return command_name(app); }
  auto const usage = formatter->make_usage(&app, command_name(app));  // "Usage: ...\n"
  auto const from  = usage.find(' ') + 1;
  return usage.substr(from, usage.find('\n') - from);
}

}  // namespace

std::string command_name(CLI::App const& app)
{
  auto const* parent = app.get_parent();
  return parent == nullptr ? app.get_name() : command_name(*parent) + " " + app.get_name();
}

std::vector<std::string> prepare_words(std::vector<std::string> words)
{
  std::vector<std::string> out;
  for (std::size_t i = 0; i < words.size(); ++i) {
    auto& w = words[i];
    if (w == "--") {
      out.insert(out.end(), words.begin() + static_cast<std::ptrdiff_t>(i), words.end());
      break;
    }
    if (w.starts_with("--") && w.size() > 3 && w.back() == '=' && w.find('=') == w.size() - 1) {
      auto const name = w.substr(0, w.size() - 1);
      throw usage_error{"option " + shown(name) + " has nothing after '='; write " + name +
                        "=VALUE or " + name + " VALUE"};
    }
    if (w == "--simulate" && i + 1 < words.size() && looks_like_size(words[i + 1]) &&
        !std::filesystem::exists(words[i + 1])) {
      w += "=" + words[++i];
    }
    out.push_back(std::move(w));
  }
  return out;
}

std::string usage_message(CLI::ParseError const& error, CLI::App const& app)
{
  std::string const text = error.what();
  if (dynamic_cast<CLI::ArgumentMismatch const*>(&error) != nullptr) {
    if (auto const p = split_at(text, ": At Most ")) {  // "--report: At Most 1 required but ..."
      return p->first + " was given more than once; give it once";
    }
    if (auto const p = split_at(text, " was given a disallowed flag override")) {  // "json was..."
      return (p->first.starts_with('-') ? p->first : "--" + p->first) + " takes no value";
    }
    if (auto const p = split_at(text, ": 1 required "); p && p->second.ends_with(" missing")) {
      auto const type = p->second.substr(0, p->second.size() - std::string_view{" missing"}.size());
      return p->first + " needs a value (" + type + ")";  // "--report: 1 required DIR missing"
    }
  }
  if (dynamic_cast<CLI::ExcludesError const*>(&error) != nullptr) {
    if (auto const p = split_at(text, " excludes ")) {  // "--json excludes --csv"
      return p->first + " and " + p->second + " cannot be given together";
    }
  }
  if (dynamic_cast<CLI::RequiredError const*>(&error) != nullptr) {
    if (auto const p = split_at(text, " is required");
        p && p->second.empty()) {  // "OUT is required"
      return "give " + p->first + ": " + usage_line(app);
    }
  }
  return text;
}

void refuse_leftovers(CLI::App const& app, CLI::App const& command)
{
  auto left = app.remaining(false);
  std::erase(left, "--");  // CLI11 keeps the end-of-options mark among the leftovers
  if (left.empty()) { return; }
  auto const& word = left.front();
  if (word.size() > 1 && word[0] == '-') { unknown_option(app, word); }
  if (command.get_parent() == nullptr) { unknown_command(app, word); }
  throw usage_error{"unexpected argument '" + shown(word) + "' for '" + command_name(command) +
                    "'"};
}

}  // namespace gpumem::tool
