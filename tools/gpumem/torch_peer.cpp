// PyTorch's allocator as a peer, in a child Python process. See torch_peer.hpp.
#include "torch_peer.hpp"

#include "installed_script.hpp"

#include <gpumem/detail/diagnostics/child_process.hpp>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <vector>

#ifndef GPUMEM_TOOL_TORCH_PEER
#define GPUMEM_TOOL_TORCH_PEER "torch_peer.py"
#endif

namespace gpumem::tool {
namespace {

std::string from_env(char const* name, char const* otherwise)
{
  char const* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string{v} : std::string{otherwise};
}

/// The child script: GPUMEM_TORCH_PEER, else beside the binary when installed, else the build
/// tree's copy.
std::string script_path()
{
  if (torch_peer_overridden()) { return from_env("GPUMEM_TORCH_PEER", ""); }
  return installed_script("torch_peer.py", GPUMEM_TOOL_TORCH_PEER);
}

std::string first_line(std::string const& s)
{
  return s.substr(0, s.find('\n'));
}

}  // namespace

char const* torch_peer_name(bool expandable) noexcept
{
  return expandable ? "torch_expandable" : "torch";
}

bool torch_peer_overridden()
{
  return !from_env("GPUMEM_TORCH_PEER", "").empty();
}

torch_peer_outcome parse_torch_peer_answer(std::string const& text)
{
  auto const j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return {std::nullopt, "its answer is not JSON: '" + first_line(text).substr(0, 80) + "'"};
  }
  if (j.contains("skipped")) {
    auto const& why = j["skipped"];
    return {std::nullopt, why.is_string() ? first_line(why.get<std::string>()) : why.dump()};
  }
  torch_peer_result r;
  for (auto [key, out] : {std::pair{"cold_ns_per_event", &r.cold_ns_per_event},
                          {"warm_ns_per_event", &r.warm_ns_per_event},
                          {"used_over_live", &r.used_over_live}}) {
    if (!j.contains(key) || !j[key].is_number() || j[key].get<double>() < 0) {
      return {std::nullopt, std::string{"its answer has no number "} + key + ": " +
                                first_line(j.dump()).substr(0, 120)};
    }
    *out = j[key].get<double>();
  }
  return {r, {}};
}

torch_peer_outcome run_torch_peer(std::string const& trace, bool expandable)
{
  auto const python = from_env("GPUMEM_PYTHON", "python3");
  auto const script = script_path();
  std::vector<std::string> argv{python, script};
  if (expandable) { argv.emplace_back("--expandable"); }
  argv.push_back(trace);
  auto const out = detail::run_program(argv);
  if (!out) {
    return {std::nullopt, "could not run " + python + " " + script +
                              " (not found, or it failed; GPUMEM_PYTHON names another Python)"};
  }
  return parse_torch_peer_answer(*out);
}

}  // namespace gpumem::tool
