// The resource-spec grammar: layers split on '>', params on ',', sizes with units.
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/stack_links.hpp>
#include <gpumem/spec/resource_spec.hpp>

#include "shown.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

namespace gpumem::spec {
namespace {

std::string_view trim(std::string_view s)
{
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) { s.remove_prefix(1); }
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) { s.remove_suffix(1); }
  return s;
}

bool is_identifier(std::string_view s)
{
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s.front()))) { return false; }
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') { return false; }
  }
  return true;
}

/// "in spec 'a>b:x'\n          ^ here"; a long spec is shown as the 80 bytes around the place.
[[noreturn]] void fail_at(std::string_view text, std::string_view part, std::string const& why)
{
  auto const col         = static_cast<std::size_t>(part.data() - text.data());
  auto const width       = detail_shown::shown_bytes;
  auto const from        = text.size() <= width || col < width / 2 ? 0 : col - width / 2;
  auto const shown       = text.substr(from, width);
  std::string const lead = from > 0 ? "..." : "";
  throw spec_error{detail::format("resource spec '", detail_shown::shown(text), "': ", why, "\n  ",
                                  lead, shown, from + shown.size() < text.size() ? "..." : "",
                                  "\n  ", std::string(lead.size() + col - from, ' '), "^")};
}

param parse_param(std::string_view text, std::string_view part)
{
  auto const eq = part.find('=');
  auto key      = trim(part.substr(0, eq));
  if (eq == std::string_view::npos || !is_identifier(key)) {
    fail_at(text, part,
            detail::format("expected key=value (e.g. initial=1GiB), found '",
                           detail_shown::shown(trim(part)), "'"));
  }
  auto value = trim(part.substr(eq + 1));
  if (value.empty()) {
    fail_at(text, part, detail::format("parameter '", detail_shown::shown(key), "' has no value"));
  }
  return {std::string{key}, std::string{value}};
}

layer_spec parse_layer(std::string_view text, std::string_view part)
{
  auto const colon = part.find(':');
  auto name        = trim(part.substr(0, colon));
  if (!is_identifier(name)) {
    fail_at(text, part,
            detail::format("expected a resource name (e.g. pool, cuda), found '",
                           detail_shown::shown(trim(part)),
                           "'; stack layers with '>' as in pool:initial=1GiB>cuda"));
  }
  layer_spec layer{std::string{name}, {}};
  if (colon == std::string_view::npos) { return layer; }
  auto rest = part.substr(colon + 1);
  while (true) {
    auto const comma = rest.find(',');
    auto const item  = rest.substr(0, comma);
    auto p           = parse_param(text, item);
    for (auto const& earlier : layer.params) {
      if (earlier.key == p.key) {
        fail_at(text, item,
                detail::format("parameter '", detail_shown::shown(p.key), "' of ",
                               detail_shown::shown(layer.name), " is given twice (",
                               detail_shown::shown(earlier.key + "=" + earlier.value), " and ",
                               detail_shown::shown(p.key + "=" + p.value), "); give it once"));
      }
    }
    layer.params.push_back(std::move(p));
    if (comma == std::string_view::npos) { break; }
    rest = rest.substr(comma + 1);
  }
  return layer;
}

std::size_t unit_of(std::string_view unit)
{
  std::string u;
  for (char c : unit) { u += static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }
  constexpr std::size_t k = 1024;
  if (u.empty() || u == "b") { return 1; }
  if (u == "k" || u == "kib") { return k; }
  if (u == "m" || u == "mib") { return k * k; }
  if (u == "g" || u == "gib") { return k * k * k; }
  if (u == "t" || u == "tib") { return k * k * k * k; }
  if (u == "kb") { return 1000; }
  if (u == "mb") { return std::size_t{1000} * 1000; }
  if (u == "gb") { return std::size_t{1000} * 1000 * 1000; }
  if (u == "tb") { return std::size_t{1000} * 1000 * 1000 * 1000; }
  return 0;
}

}  // namespace

resource_spec parse_resource_spec(std::string_view text)
{
  resource_spec spec;
  if (trim(text).empty()) {
    throw spec_error{
        "empty resource spec: name a resource, e.g. 'pool' or 'pool:initial=1GiB>cuda'"
        " (`gpumem replay --list-resources` lists them)"};
  }
  std::string_view rest = text;
  while (true) {
    auto const gt = rest.find('>');
    if (spec.layers.size() == max_stack_depth) {
      throw spec_error{detail::format("a resource spec may have at most ", max_stack_depth,
                                      " layers; this one has ",
                                      std::count(text.begin(), text.end(), '>') + 1)};
    }
    spec.layers.push_back(parse_layer(text, rest.substr(0, gt)));
    if (gt == std::string_view::npos) { break; }
    rest = rest.substr(gt + 1);
  }
  return spec;
}

std::string to_string(resource_spec const& spec)
{
  std::string out;
  for (auto const& layer : spec.layers) {
    if (!out.empty()) { out += '>'; }
    out += layer.name;
    char sep = ':';
    for (auto const& p : layer.params) {
      out += sep;
      out += p.key + "=" + p.value;
      sep = ',';
    }
  }
  return out;
}

std::size_t parse_size(std::string_view text, std::string_view what)
{
  auto const s = trim(text);
  if (s == "max") { return std::numeric_limits<std::size_t>::max(); }
  std::size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) { ++i; }
  auto const number = s.substr(0, i);
  auto const unit   = unit_of(trim(s.substr(i)));
  auto const dot    = number.find('.');
  if (number.empty() || number == "." || unit == 0 ||
      (dot != std::string_view::npos && number.find('.', dot + 1) != std::string_view::npos)) {
    throw spec_error{detail::format(
        what, ": cannot read '", detail_shown::shown(text),
        "' as a size; write a number with an optional unit: 4096, 256KiB, 1.5GiB, 80GB or max")};
  }
  auto too_large = [&] {
    return spec_error{
        detail::format(what, ": '", detail_shown::shown(text), "' is more than 2^64-1 bytes (",
                       std::numeric_limits<std::size_t>::max(), "); write max for no limit")};
  };
  if (dot == std::string_view::npos) {  // whole numbers exactly, however large
    std::size_t v = 0;
    for (char c : number) {
      if (__builtin_mul_overflow(v, std::size_t{10}, &v) ||
          __builtin_add_overflow(v, static_cast<std::size_t>(c - '0'), &v)) {
        throw too_large();
      }
    }
    if (__builtin_mul_overflow(v, unit, &v)) { throw too_large(); }
    return v;
  }
  long double const bytes =
      std::strtold(std::string{number}.c_str(), nullptr) * static_cast<long double>(unit);
  if (!(bytes < 0x1p64L)) { throw too_large(); }
  auto const rounded = std::roundl(bytes);
  if (!(rounded < 0x1p64L)) { throw too_large(); }
  return static_cast<std::size_t>(rounded);
}

std::size_t parse_size_in(std::string_view text, std::string_view what, std::size_t least,
                          std::size_t most)
{
  auto const bytes = parse_size(text, what);
  if (bytes < least || bytes > most) {
    throw spec_error{detail::format(what, ": '", detail_shown::shown(text),
                                    "' is out of range; give a size from ", size_to_string(least),
                                    " to ", size_to_string(most))};
  }
  return bytes;
}

std::string size_to_string(std::size_t bytes)
{
  static constexpr char const* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes == std::numeric_limits<std::size_t>::max()) { return "max"; }
  int u = 0;
  while (u < 4 && bytes >= (std::size_t{1024} << (10 * u))) { ++u; }
  std::size_t const scale = std::size_t{1} << (10 * u);
  if (bytes % scale == 0) { return detail::format(bytes / scale, units[u]); }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%s", static_cast<double>(bytes) / static_cast<double>(scale),
                units[u]);
  try {  // rounded up near 2^64, the short form would not read back: give the exact bytes then
    (void)parse_size(buf);
    return buf;
  } catch (spec_error const&) {
    return detail::format(bytes, "B");
  }
}

}  // namespace gpumem::spec
