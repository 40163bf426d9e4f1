// The validators of option_values.hpp.
#include "option_values.hpp"

#include "closest_name.hpp"

#include <gpumem/spec/resource_spec.hpp>

namespace gpumem::tool {

std::string shown(std::string const& word)
{
  constexpr std::size_t most = 80;
  if (word.size() <= most) { return word; }
  return word.substr(0, most) + "... (" + std::to_string(word.size()) + " bytes)";
}

bool looks_like_size(std::string const& word)
{
  try {
    (void)spec::parse_size(word);
    return true;
  } catch (spec::spec_error const&) {
    return false;
  }
}

CLI::Validator size_between(std::size_t least, std::size_t most)
{
  auto check = [least, most](std::string& value) -> std::string {
    try {
      (void)spec::parse_size_in(value, "the size", least, most);
      return {};
    } catch (spec::spec_error const& e) {
      return std::string{e.what()}.substr(std::string_view{"the size: "}.size());
    }
  };
  return CLI::Validator{check, ""};
}

CLI::Validator count_between(std::uint64_t least, std::uint64_t most)
{
  auto check = [least, most](std::string& value) -> std::string {
    auto const range =
        " (give a whole number from " + std::to_string(least) + " to " + std::to_string(most) + ")";
    std::uint64_t n = 0;
    bool overflow   = false;
    for (char c : value) {
      if (c < '0' || c > '9') { return "'" + shown(value) + "' is not a count" + range; }
      overflow = overflow || __builtin_mul_overflow(n, 10U, &n) ||
                 __builtin_add_overflow(n, static_cast<std::uint64_t>(c - '0'), &n);
    }
    if (value.empty()) { return "the value is empty" + range; }
    if (overflow || n < least || n > most) { return shown(value) + " is out of range" + range; }
    value = std::to_string(n);
    return {};
  };
  return CLI::Validator{check, ""};
}

CLI::Validator one_of(std::string kind, std::vector<std::string> names)
{
  auto check = [kind = std::move(kind), names = std::move(names)](std::string& value) {
    if (std::find(names.begin(), names.end(), value) != names.end()) { return std::string{}; }
    auto const guess    = closest_name(value, names);
    std::string message = "unknown " + kind + " '" + shown(value) + "'";
    if (!guess.empty()) { message += "; did you mean " + guess + "?"; }
    return message + " (the " + kind + "s are " + CLI::detail::join(names, ", ") + ")";
  };
  return CLI::Validator{check, ""};
}

CLI::Validator not_empty(std::string what)
{
  auto check = [what = std::move(what)](std::string& value) {
    return value.empty() ? "the value is empty; give " + what : std::string{};
  };
  return CLI::Validator{check, ""};
}

}  // namespace gpumem::tool
