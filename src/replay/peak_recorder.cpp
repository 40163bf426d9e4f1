// peak_recorder: the layout at the peak from a snapshot and a log (see peak_recorder.hpp).
#include "peak_recorder.hpp"

#include <map>
#include <unordered_map>

namespace gpumem::trace {

memory_state peak_recorder::at_peak() const
{
  if (!have_peak_) { return {}; }
  return logging_ ? replay_log(mark_) : settled_;
}

void peak_recorder::log_noexcept(entry e) noexcept
{
  try {
    log(e);
  } catch (...) {
    logging_   = false;
    have_peak_ = false;
    log_.clear();
    mark_ = 0;
  }
}

void peak_recorder::settle()
{
  settled_ = replay_log(mark_);
  logging_ = false;
  log_.clear();
  blocks_.clear();
  chunks_.clear();
  mark_ = 0;
}

memory_state peak_recorder::replay_log(std::size_t n) const
{
  std::unordered_map<std::uintptr_t, std::size_t> blocks{blocks_.begin(), blocks_.end()};
  std::map<std::uintptr_t, std::size_t> chunks{chunks_.begin(), chunks_.end()};
  for (std::size_t i = 0; i < n; ++i) {
    auto const& [range, what] = log_[i];
    switch (what) {
      case change::add_block:
        blocks[range.first] = range.second;
        break;
      case change::remove_block:
        blocks.erase(range.first);
        break;
      case change::add_chunk:
        chunks[range.first] = range.second;
        break;
      case change::remove_chunk:
        chunks.erase(range.first);
        break;
    }
  }
  std::vector<address_range> held{chunks.begin(), chunks.end()};
  if (join_) { held = join_adjacent(std::move(held)); }
  return lay_out({blocks.begin(), blocks.end()}, held, peak_.held_bytes, peak_.live_bytes,
                 peak_.live_blocks, granted_ ? *granted_ : grant_fn{});
}

}  // namespace gpumem::trace
