// vmm_backing's home layout: the handles moved back where they were when the pool was last wholly
// free (detail/vmm_home_layout.hpp says why).
#include <gpumem/detail/vmm_backing.hpp>

#include <algorithm>

namespace gpumem::detail {

using slot = vmm_home_layout::slot;

std::vector<slot> vmm_backing::present_slots() const
{
  std::vector<slot> out;
  out.reserve(mapped_.size());
  for (auto const& [at, m] : mapped_) {
    if (m.present) { out.push_back({at, m.bytes}); }
  }
  return out;
}

std::size_t vmm_backing::moves_home()
{
  if (paused_) { return 0; }
  auto now = present_slots();
  if (!home_.empty()) {
    if (auto const moves = home_.plan(now)) { return moves->size(); }
  }
  home_.remember(std::move(now));
  return 0;
}

void vmm_backing::remember_home()
{
  if (!paused_) { home_.remember(present_slots()); }
}

// The idle list of a wholly free pool mapped at `slots`: adjacent slots coalesce into one block.
coalescing_free_list vmm_backing::idle_of(std::vector<slot> const& slots) const
{
  coalescing_free_list idle;
  for (auto const& s : slots) { idle.insert({s.at, s.bytes, idle_chunk_}); }
  return idle;
}

std::size_t vmm_backing::return_home(coalescing_free_list& idle)
{
  if (paused_ || home_.empty()) { return 0; }
  auto const now   = present_slots();
  auto const moves = home_.plan(now);
  if (!moves || moves->empty()) { return 0; }
  // Host memory first (a failure changes nothing): each moved handle, and the idle list both
  // without the moved handles and with them at home.
  std::vector<vmm_handle> handles;
  handles.reserve(moves->size());
  std::vector<char*> from;
  from.reserve(moves->size());
  for (auto const& m : *moves) {
    handles.push_back(mapped_.at(m.from).handle);
    from.push_back(m.from);
  }
  std::sort(from.begin(), from.end());
  std::vector<slot> staying;
  std::copy_if(now.begin(), now.end(), std::back_inserter(staying),
               [&](slot const& s) { return !std::binary_search(from.begin(), from.end(), s.at); });
  auto without = idle_of(staying);
  auto at_home = idle_of(home_.slots());
  std::vector<char*> to;  // the destinations in address order: access is granted per run of them
  to.reserve(moves->size());
  for (auto const& m : *moves) { to.push_back(m.to); }
  std::sort(to.begin(), to.end());

  for (std::size_t k = 0; k < moves->size(); ++k) {
    auto const& m = (*moves)[k];
    note(vmm_mapping_cause::home, false, m.from, m.bytes, {handles[k]}, {m.bytes});
    unmap_donor({handles[k], m.bytes, m.from});
  }
  idle               = std::move(without);
  std::size_t mapped = 0;
  try {
    for (; mapped < moves->size(); ++mapped) {
      map_at((*moves)[mapped].to, {handles[mapped], (*moves)[mapped].bytes, nullptr});
    }
    for (auto const& r : runs_of(to)) { grant(r.at, r.bytes); }
  } catch (...) {
    unwind_home(*moves, handles, mapped);
    home_.remember({});  // the next wholly free moment remembers what is mapped then
    throw;
  }
  idle = std::move(at_home);
  for (std::size_t k = 0; k < moves->size(); ++k) {
    auto const& m = (*moves)[k];
    note(vmm_mapping_cause::home, true, m.to, m.bytes, {handles[k]}, {m.bytes});
  }
  return moves->size();
}

// A failed map or grant: the handles mapped at home in this call are unmapped again, and every
// moved handle is offered to the spares (released beyond their limit). Idle already holds what
// stays mapped.
void vmm_backing::unwind_home(std::vector<vmm_home_layout::move> const& moves,
                              std::vector<vmm_handle> const& handles, std::size_t mapped) noexcept
{
  for (std::size_t k = 0; k < mapped; ++k) {
    unmap_donor({handles[k], moves[k].bytes, moves[k].to});
  }
  for (std::size_t k = 0; k < moves.size(); ++k) { spares_.offer(handles[k], moves[k].bytes); }
}

}  // namespace gpumem::detail
