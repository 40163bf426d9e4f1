// tests/support/fuzz_settings.hpp — how long and from which seeds the fuzz walks run: small for
// CI by default; two environment variables, read by the tests only, make longer or wider runs:
//   GPUMEM_FUZZ_STEPS=N          steps per walk (each suite's default otherwise);
//   GPUMEM_FUZZ_SEEDS=a,b,...    the seeds (each suite's three otherwise); or
//   GPUMEM_FUZZ_SEEDS=first-last every seed of a range, e.g. 1-500.
// A walk's checks that it reached the paths it is meant to test hold for its own seeds and length
// only (fuzz_reach_checked); its invariants are checked whatever the seeds and length.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpumem::test {

inline int fuzz_steps(int fallback)
{
  char const* env = std::getenv("GPUMEM_FUZZ_STEPS");
  return env != nullptr ? std::atoi(env) : fallback;
}

/// Whether GPUMEM_FUZZ_SEEDS chose the seeds: a walk's "it reached this path" checks hold for the
/// default seeds, and other seeds are run for the invariants only.
inline bool fuzz_seeds_given()
{
  char const* env = std::getenv("GPUMEM_FUZZ_SEEDS");
  return env != nullptr && *env != '\0';
}

/// Whether the walk runs with its suite's own seeds and at least its own length: only then do its
/// "it reached this path" checks hold (shorter walks and other seeds check the invariants only).
inline bool fuzz_reach_checked(int default_steps)
{
  return !fuzz_seeds_given() && fuzz_steps(default_steps) >= default_steps;
}

/// The seeds GPUMEM_FUZZ_SEEDS names, else `fallback`. A malformed value fails loudly (a fuzz run
/// that silently ran the default seeds would report coverage it did not have).
inline std::vector<std::uint64_t> fuzz_seeds(std::vector<std::uint64_t> fallback)
{
  if (!fuzz_seeds_given()) { return fallback; }
  std::string const text{std::getenv("GPUMEM_FUZZ_SEEDS")};
  std::vector<std::uint64_t> seeds;
  auto const number = [&](std::string const& s) {
    std::size_t used = 0;
    auto const value = std::stoull(s, &used);
    if (used != s.size()) { throw std::invalid_argument{s}; }
    return static_cast<std::uint64_t>(value);
  };
  try {
    if (auto dash = text.find('-'); dash != std::string::npos) {
      auto const first = number(text.substr(0, dash));
      auto const last  = number(text.substr(dash + 1));
      for (auto s = first; s <= last && seeds.size() < 1'000'000; ++s) { seeds.push_back(s); }
    } else {
      std::istringstream in{text};
      for (std::string item; std::getline(in, item, ',');) { seeds.push_back(number(item)); }
    }
  } catch (std::exception const&) {
    throw std::invalid_argument{"GPUMEM_FUZZ_SEEDS='" + text +
                                "': expected numbers separated by commas, or first-last"};
  }
  if (seeds.empty()) {
    throw std::invalid_argument{"GPUMEM_FUZZ_SEEDS='" + text + "' names no seed"};
  }
  return seeds;
}

}  // namespace gpumem::test
