// tools/gpumem/torch_peer.hpp — PyTorch's caching allocator (default, and with expandable
// segments) as peers of `gpumem bench -w replay`, each run in a child Python process
// (torch_peer.py beside the binary) that replays the trace and answers in JSON: cold and warm ns
// per event, and peak device used (cudaMemGetInfo after every allocation) / peak live bytes.
//
// GPUMEM_TORCH_PEER names another script to run instead (same arguments, same answer);
// GPUMEM_PYTHON the Python to run it with (default python3).
#pragma once

#include <optional>
#include <string>

namespace gpumem::tool {

struct torch_peer_result {
  double cold_ns_per_event{};
  double warm_ns_per_event{};
  double used_over_live{};  ///< peak device used / peak live bytes
};

/// A result, or why the peer did not run (one line).
struct torch_peer_outcome {
  std::optional<torch_peer_result> result;
  std::string skipped;
};

/// The peers' names, as columns: "torch" (expandable false) and "torch_expandable".
[[nodiscard]] char const* torch_peer_name(bool expandable) noexcept;

/// Whether the peers should run although there is no GPU (a script was named for them).
[[nodiscard]] bool torch_peer_overridden();

/// Runs the peer over `trace` in a child process and reads its answer.
[[nodiscard]] torch_peer_outcome run_torch_peer(std::string const& trace, bool expandable);

/// Reads the child's answer: {"skipped": why} or the figures; anything else is a skip that says
/// what was wrong with it.
[[nodiscard]] torch_peer_outcome parse_torch_peer_answer(std::string const& text);

}  // namespace gpumem::tool
