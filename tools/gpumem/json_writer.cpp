// The streaming JSON writer of the tool's reports (see json_writer.hpp).
#include "json_writer.hpp"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string_view>

namespace gpumem::tool {
namespace {

std::atomic<bool> said_not_utf8{false};

void say_not_utf8_once()
{
  if (!said_not_utf8.exchange(true)) {
    std::cerr << "gpumem: a trace name, resource or stack frame holds bytes that are not UTF-8; "
                 "the report shows each as U+FFFD\n";
  }
}

}  // namespace

std::string json_text(nlohmann::ordered_json const& v)
{
  using handler = nlohmann::ordered_json::error_handler_t;
  try {
    return v.dump(-1, ' ', false, handler::strict);
  } catch (nlohmann::ordered_json::type_error const&) {  // not UTF-8 (the only error of dump)
    say_not_utf8_once();
    return v.dump(-1, ' ', false, handler::replace);
  }
}

nlohmann::ordered_json six_digits(double v)
{
  if (!std::isfinite(v)) { return nullptr; }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  if (std::string_view{buf}.find_first_of(".e") == std::string_view::npos) {
    return std::strtoll(buf, nullptr, 10);  // "1572": an integer, as it reads
  }
  return std::strtod(buf, nullptr);
}

nlohmann::ordered_json exact(double v)
{
  if (!std::isfinite(v)) { return nullptr; }
  if (std::trunc(v) == v && std::fabs(v) < 1e17) { return static_cast<std::int64_t>(v); }
  return v;  // nlohmann-json writes the shortest text that reads back as v
}

void json_writer::key(std::string_view name)
{
  separate();
  out_ << json_text(nlohmann::ordered_json(name)) << ':';
  after_key_ = true;
}

void json_writer::value(nlohmann::ordered_json const& v)
{
  separate();
  out_ << json_text(v);
}

void json_writer::open(char bracket)
{
  separate();
  out_ << bracket;
  empty_.push_back(true);
}

void json_writer::close(char bracket)
{
  empty_.pop_back();
  out_ << bracket;
}

void json_writer::separate()
{
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (empty_.empty()) { return; }
  if (!empty_.back()) { out_ << ','; }
  empty_.back() = false;
}

}  // namespace gpumem::tool
