// Registrations that follow a virtual-memory pool's mappings. See gpumem/mr/vmm_registrar.hpp.
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>
#include <gpumem/mr/vmm_registrar.hpp>

#include <atomic>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <utility>

namespace gpumem::mr {

// Invariant: regs holds disjoint ranges (address -> bytes, token); closed => regs is empty.
struct vmm_registrar::state {
  register_fn reg;
  deregister_fn dereg;
  vmm_registration_unit unit;
  mutable std::mutex mutex;
  struct entry {
    std::size_t bytes{};
    void* token{};
  };
  std::map<char*, entry> regs;  // guarded by mutex
  bool closed{};                // guarded by mutex
  std::string last_failure;     // guarded by mutex
  std::atomic<std::uint64_t> registered{}, deregistered{}, failures{};

  void on_map(vmm_mapping_event const& e) noexcept
  {
    std::lock_guard lock{mutex};
    if (closed) { return; }
    auto* at = static_cast<char*>(e.ptr);
    if (unit == vmm_registration_unit::run || !tiles(e)) { return cover(at, e.bytes); }
    for (auto n : e.handle_bytes) {
      cover(at, n);
      at += n;
    }
  }

  void on_unmap(vmm_mapping_event const& e) noexcept
  {
    std::lock_guard lock{mutex};
    if (!closed) { drop(static_cast<char*>(e.ptr), e.bytes); }
  }

  /// Registers [at, at + n) unless exactly that is registered (a mapping seen twice: in the
  /// snapshot and in an event); what overlaps it is stale and dropped first.
  void cover(char* at, std::size_t n) noexcept
  {
    if (auto it = regs.find(at); it != regs.end() && it->second.bytes == n) { return; }
    drop(at, n);
    add(at, n);
  }

  /// Deregisters everything overlapping [at, at + n) and registers again what of it lies outside.
  void drop(char* at, std::size_t n) noexcept
  {
    char* const end = at + n;
    auto it         = regs.upper_bound(at);
    if (it != regs.begin() && std::prev(it)->first + std::prev(it)->second.bytes > at) { --it; }
    std::vector<std::pair<char*, std::size_t>> rest;
    while (it != regs.end() && it->first < end) {
      // No structured binding: clang 14 does not let the lambda below capture one.
      char* const start = it->first;
      auto const e      = it->second;
      call([&] { dereg(e.token); }, deregistered, "deregister", start, e.bytes);
      it = regs.erase(it);
      if (start < at) { rest.emplace_back(start, static_cast<std::size_t>(at - start)); }
      if (start + e.bytes > end) {
        rest.emplace_back(end, static_cast<std::size_t>(start + e.bytes - end));
      }
    }
    for (auto const& [p, bytes] : rest) { add(p, bytes); }
  }

  void add(char* at, std::size_t n) noexcept
  {
    void* token{};
    if (call([&] { token = reg(at, n); }, registered, "register", at, n)) {
      try {
        regs.emplace(at, entry{n, token});
      } catch (...) {  // host memory exhausted: undo, so that no registration is lost track of
        call([&] { dereg(token); }, deregistered, "deregister", at, n);
      }
    }
  }

  template <class F>
  bool call(F&& f, std::atomic<std::uint64_t>& done, char const* what, char* at,
            std::size_t n) noexcept
  {
    try {
      f();
      done.fetch_add(1);
      return true;
    } catch (std::exception const& e) {
      fail(what, at, n, e.what());
    } catch (...) {
      fail(what, at, n, "an exception of an unknown type");
    }
    return false;
  }

  void fail(char const* what, char* at, std::size_t n, char const* why) noexcept
  {
    failures.fetch_add(1);
    try {
      last_failure = detail::format(what, " of ", detail::bytes_str(n), " at ",
                                    static_cast<void*>(at), " failed: ", why);
    } catch (...) {  // NOLINT(bugprone-empty-catch): the count is kept; the message is lost
    }
  }

  /// True when the event's handle sizes tile it.
  static bool tiles(vmm_mapping_event const& e) noexcept
  {
    return !e.handle_bytes.empty() &&
           std::accumulate(e.handle_bytes.begin(), e.handle_bytes.end(), std::size_t{0}) == e.bytes;
  }
};

vmm_registrar::vmm_registrar(vmm_pool_memory_resource& pool, register_fn reg, deregister_fn dereg,
                             vmm_registration_unit unit)
    : state_{std::make_shared<state>()}, pool_{&pool}
{
  GPUMEM_EXPECTS(reg && dereg, logic_error,
                 "vmm_registrar: both the register and the deregister callables are needed");
  state_->reg               = std::move(reg);
  state_->dereg             = std::move(dereg);
  state_->unit              = unit;
  std::weak_ptr<state> weak = state_;
  on_map_                   = pool.add_map_listener([weak](vmm_mapping_event const& e) {
    if (auto s = weak.lock()) { s->on_map(e); }
  });
  try {
    on_unmap_ = pool.add_unmap_listener([weak](vmm_mapping_event const& e) {
      if (auto s = weak.lock()) { s->on_unmap(e); }
    });
    for (auto const& run : pool.mapped_runs()) { state_->on_map(run); }
  } catch (...) {
    close();
    throw;
  }
}

vmm_registrar::~vmm_registrar()
{
  close();
}

void vmm_registrar::close() noexcept
{
  if (on_map_ != 0) { pool_->remove_listener(on_map_); }
  if (on_unmap_ != 0) { pool_->remove_listener(on_unmap_); }
  on_map_ = on_unmap_ = 0;
  std::lock_guard lock{state_->mutex};
  for (auto const& reg : state_->regs) {  // no structured binding: the lambda captures it
    auto const& e = reg.second;
    state_->call([&] { state_->dereg(e.token); }, state_->deregistered, "deregister", reg.first,
                 e.bytes);
  }
  state_->regs.clear();
  state_->closed = true;
}

bool vmm_registrar::closed() const noexcept
{
  std::lock_guard lock{state_->mutex};
  return state_->closed;
}

std::vector<vmm_registrar::registration> vmm_registrar::registrations() const
{
  std::lock_guard lock{state_->mutex};
  std::vector<registration> out;
  out.reserve(state_->regs.size());
  for (auto const& [at, e] : state_->regs) { out.push_back({at, e.bytes, e.token}); }
  return out;
}

vmm_registration_unit vmm_registrar::unit() const noexcept
{
  return state_->unit;
}

std::uint64_t vmm_registrar::registered() const noexcept
{
  return state_->registered.load();
}

std::uint64_t vmm_registrar::deregistered() const noexcept
{
  return state_->deregistered.load();
}

std::uint64_t vmm_registrar::failures() const noexcept
{
  return state_->failures.load();
}

std::string vmm_registrar::last_failure() const
{
  std::lock_guard lock{state_->mutex};
  return state_->last_failure;
}

}  // namespace gpumem::mr
