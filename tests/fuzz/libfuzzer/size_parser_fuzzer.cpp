// libFuzzer target: parse_size on any text. It either throws spec_error or returns the exact value:
// whole numbers are checked against a 128-bit reference, and size_to_string reads back exactly.
#include <gpumem/spec/resource_spec.hpp>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

namespace {

/// The exact value of "<digits><unit>" (units in 1024s or 1000s), or nullopt-ish -1 when the text
/// is not of that simple form or exceeds 2^64-1.
__int128 reference(std::string_view s)
{
  std::size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) { ++i; }
  std::size_t const start = i;
  unsigned __int128 v     = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    v = v * 10 + static_cast<unsigned>(s[i] - '0');
    if (v > std::numeric_limits<std::uint64_t>::max()) { return -2; }
    ++i;
  }
  if (i == start || (i < s.size() && s[i] == '.')) { return -1; }
  std::string unit;
  for (; i < s.size(); ++i) {
    if (!std::isspace(static_cast<unsigned char>(s[i]))) {
      unit += static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
    } else if (!unit.empty()) {
      break;
    }
  }
  for (; i < s.size(); ++i) {
    if (!std::isspace(static_cast<unsigned char>(s[i]))) { return -1; }
  }
  unsigned __int128 m = 0;
  if (unit.empty() || unit == "b")
    m = 1;
  else if (unit == "k" || unit == "kib")
    m = 1ULL << 10;
  else if (unit == "m" || unit == "mib")
    m = 1ULL << 20;
  else if (unit == "g" || unit == "gib")
    m = 1ULL << 30;
  else if (unit == "t" || unit == "tib")
    m = 1ULL << 40;
  else if (unit == "kb")
    m = 1000;
  else if (unit == "mb")
    m = 1000000;
  else if (unit == "gb")
    m = 1000000000;
  else if (unit == "tb")
    m = 1000000000000;
  else
    return -1;
  v *= m;
  return v > std::numeric_limits<std::uint64_t>::max() ? -2 : static_cast<__int128>(v);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size)
{
  using namespace gpumem::spec;
  std::string_view const text{reinterpret_cast<char const*>(data), size};
  auto const want = reference(text);
  std::size_t got = 0;
  try {
    got = parse_size(text, "fuzz");
  } catch (spec_error const&) {
    if (want >= 0) { std::abort(); }  // a plain whole size must be read
    return 0;
  }
  if (want == -2) { std::abort(); }  // too large must be refused, not wrapped
  if (want >= 0 && static_cast<__int128>(got) != want) { std::abort(); }
  auto const printed = size_to_string(got);
  auto const back    = parse_size(printed, "fuzz");
  if (printed.find('.') == std::string::npos && back != got) { std::abort(); }
  // parse_size_in: the same value when it lies in the range, else spec_error (never a wrap).
  for (auto const [least, most] : {std::pair<std::size_t, std::size_t>{1, most_device_bytes},
                                   {0, std::numeric_limits<std::size_t>::max()}}) {
    try {
      if (parse_size_in(text, "fuzz", least, most) != got || got < least || got > most) {
        std::abort();
      }
    } catch (spec_error const&) {
      if (got >= least && got <= most) { std::abort(); }
    }
  }
  return 0;
}
