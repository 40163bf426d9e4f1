// gpumem/mr/vmm_pause.hpp — giving a virtual-memory pool's physical memory back and taking it
// again at the same addresses (vmm_pool_memory_resource::pause / resume; docs/sleep.md).
//
//   pause_mode::discard   the memory is given back; its contents are lost (after resume the
//                         addresses hold whatever the new physical memory holds)
//   pause_mode::offload   the contents are first copied to pinned host memory and copied back on
//                         resume, bit for bit
//   pause_mode::offload_to_file
//                         the contents are written to a temporary file (through a bounded pinned
//                         host buffer, not one the pool's size) and read back on resume, bit for
//                         bit: for contents larger than the host memory one wants to pin
//
// States: active --pause(discard)--> paused_discarded --resume()--> active
//         active --pause(offload or offload_to_file)--> paused_offloaded --resume()--> active
// pause() of a paused pool and resume() of an active pool change nothing and return false.
#pragma once

#include <gpumem/error.hpp>

#include <string>
#include <system_error>

namespace gpumem {

/// What pause() does with the contents of the memory it gives back.
enum class pause_mode {
  discard,  ///< contents lost
  offload,  ///< contents kept in pinned host memory until resume
  /// contents kept in a temporary file (vmm_pool_options::offload_directory) until resume
  offload_to_file,
};

/// The state of a pausable pool.
enum class pause_state {
  active,            ///< memory mapped; allocations served
  paused_discarded,  ///< memory given back, contents lost; allocations refused
  paused_offloaded,  ///< memory given back, contents in host memory; allocations refused
};

[[nodiscard]] constexpr char const* to_string(pause_mode mode) noexcept
{
  switch (mode) {
    case pause_mode::discard:
      return "discard";
    case pause_mode::offload:
      return "offload";
    case pause_mode::offload_to_file:
      return "offload to file";
  }
  return "unknown";
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

/// The file of pause(pause_mode::offload_to_file) could not be created, written or read back
/// (a missing directory, a full disk, an I/O error). what() names the file's directory, the
/// bytes and the system's reason; code() is the errno. The pool is left as before the call: a
/// failed pause leaves it active, a failed resume leaves it paused with its file intact.
class offload_file_error : public std::system_error {
 public:
  offload_file_error(int error, std::string const& what)
      : std::system_error{error, std::generic_category(), what}
  {
  }
};

}  // namespace gpumem
