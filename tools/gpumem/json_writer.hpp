// tools/gpumem/json_writer.hpp — JSON written as it goes: the writer puts the brackets of objects
// and arrays itself, so that a large array streams out one element at a time (memory does not
// grow with the trace), and nlohmann-json serializes each value. Text that is not UTF-8 (a trace
// name, a resource spec, a stack frame) comes out with each bad sequence as U+FFFD, so the output
// is always valid UTF-8 JSON; the first such text is said once on stderr.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <charconv>
#include <concepts>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem::tool {

class json_writer {
 public:
  explicit json_writer(std::ostream& out) : out_{out} {}

  void begin_object() { open('{'); }
  void end_object() { close('}'); }
  void begin_array() { open('['); }
  void end_array() { close(']'); }
  /// The name of the next member of the open object; its value follows.
  void key(std::string_view name);
  /// One value: an element of the open array, the value after key(), or the whole document.
  void value(nlohmann::ordered_json const& v);
  /// key(name), then value(v).
  void member(std::string_view name, nlohmann::ordered_json const& v)
  {
    key(name);
    value(v);
  }
  /// One integer: an element of the large arrays. Integers need no escaping, so they skip the
  /// serializer (the text is the same).
  template <std::integral Int>
  void integer(Int v)
  {
    separate();
    write_integer(v);
  }
  /// One small array of integers, "[a,b,…]" (what the large arrays are made of), written as
  /// integer() writes each.
  template <std::integral... Int>
  void integers(Int... v)
  {
    separate();
    char sep = '[';
    ((out_.put(sep), write_integer(v), sep = ','), ...);
    out_.put(']');
  }

 private:
  void open(char bracket);
  void close(char bracket);
  /// Writes the comma before an element that is not the first of its container.
  void separate();
  template <std::integral Int>
  void write_integer(Int v)
  {
    std::array<char, 21> buf;  // 20 digits, or a sign and 19
    auto const end = std::to_chars(buf.data(), buf.data() + buf.size(), v).ptr;
    out_.write(buf.data(), end - buf.data());
  }

  std::ostream& out_;
  /// One entry per open object or array: true until its first element (or member) is written.
  std::vector<bool> empty_;
  /// True between key() and its value: that value takes no comma.
  bool after_key_{};
};

/// `v` as the report has always written numbers: 6 significant digits, an integer when that
/// reads as one ("1572"), else a number with a fraction or exponent; NaN and infinity, which JSON
/// cannot hold, become null.
[[nodiscard]] nlohmann::ordered_json six_digits(double v);

/// `v` as it is: a number that reads back as exactly `v` (an integer when `v` is a whole number
/// below 1e17, as "%.17g" writes it); NaN and infinity, which JSON cannot hold, become null.
[[nodiscard]] nlohmann::ordered_json exact(double v);

/// `v` as compact JSON text; in its strings, each byte sequence that is not UTF-8 becomes U+FFFD.
[[nodiscard]] std::string json_text(nlohmann::ordered_json const& v);

}  // namespace gpumem::tool
