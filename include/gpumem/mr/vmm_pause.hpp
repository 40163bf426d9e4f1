// gpumem/mr/vmm_pause.hpp — giving a virtual-memory pool's physical memory back and taking it
// again at the same addresses (vmm_pool_memory_resource::pause / resume; docs/sleep.md).
//
//   pause_mode::discard   the memory is given back; its contents are lost (after resume the
//                         addresses hold whatever the new physical memory holds)
//   pause_mode::offload   the contents are first copied to pinned host memory and copied back on
//                         resume, bit for bit
//
// States: active --pause(discard)--> paused_discarded --resume()--> active
//         active --pause(offload)--> paused_offloaded --resume()--> active
// pause() of a paused pool and resume() of an active pool change nothing and return false.
#pragma once

#include <gpumem/error.hpp>

namespace gpumem {

/// What pause() does with the contents of the memory it gives back.
enum class pause_mode {
  discard,  ///< contents lost
  offload,  ///< contents kept in pinned host memory until resume
};

/// The state of a pausable pool.
enum class pause_state {
  active,            ///< memory mapped; allocations served
  paused_discarded,  ///< memory given back, contents lost; allocations refused
  paused_offloaded,  ///< memory given back, contents in host memory; allocations refused
};

[[nodiscard]] constexpr char const* to_string(pause_mode mode) noexcept
{
  return mode == pause_mode::discard ? "discard" : "offload";
}

[[nodiscard]] constexpr char const* to_string(pause_state state) noexcept
{
  switch (state) {
    case pause_state::active:
      return "active";
    case pause_state::paused_discarded:
      return "paused (discarded)";
    case pause_state::paused_offloaded:
      return "paused (offloaded)";
  }
  return "unknown";
}

/// An allocation from a pool whose memory is paused (given back): resume() it first. A misuse,
/// so a logic_error; not an out_of_memory (retrying or freeing memory cannot help).
class paused_error : public logic_error {
 public:
  using logic_error::logic_error;
};

}  // namespace gpumem
