// src/spec/defaults.hpp — a parameter's default as the spec table shows it, computed from the
// default value of the resource's options struct (internal to the spec table), so that each
// default is written once, in the C++ options, and the table can never disagree with it.
#pragma once

#include <gpumem/spec/resource_spec.hpp>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>

namespace gpumem::spec::detail_defaults {

/// An integer default: "12".
[[nodiscard]] inline std::string count_text(std::uint64_t value)
{
  return std::to_string(value);
}

/// A fraction or factor: the shortest text that reads back as the same double ("0.125").
[[nodiscard]] inline std::string number_text(double value)
{
  char buf[32];
  auto const end = std::to_chars(buf, buf + sizeof buf, value).ptr;
  return std::string{buf, end};
}

/// A size ("16MiB"), or "none" when the value is the options' "no value" (`none`).
[[nodiscard]] inline std::string size_or_none(std::size_t value, std::size_t none)
{
  return value == none ? std::string{"none"} : size_to_string(value);
}

/// A bin number, or "max" for the options' "no maximum" (all ones).
[[nodiscard]] inline std::string bin_or_max(unsigned value)
{
  return value == static_cast<unsigned>(-1) ? std::string{"max"} : count_text(value);
}

/// A byte count, or "max" for SIZE_MAX.
[[nodiscard]] inline std::string bytes_or_max(std::size_t value)
{
  return value == SIZE_MAX ? std::string{"max"} : count_text(value);
}

/// A switch: "true" or "false".
[[nodiscard]] inline std::string flag_text(bool value)
{
  return value ? "true" : "false";
}

}  // namespace gpumem::spec::detail_defaults
