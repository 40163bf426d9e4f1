// gpumem/mr/vmm_registrar.hpp — keeps a registration (NCCL's ncclCommRegister, an RDMA memory
// region, ...) on all of a virtual-memory pool's physical memory while the pool grows, moves
// memory, trims, pauses and resumes.
//
//   mr::vmm_registrar reg{pool,
//                         [&](void* p, std::size_t n) {
//                           void* h{};
//                           check(ncclCommRegister(comm, p, n, &h));
//                           return h;
//                         },
//                         [&](void* h) { ncclCommDeregister(comm, h); }};
//
// It registers what the pool has mapped when it is made, then, through the pool's map and unmap
// listeners, what each growth or resume maps, and deregisters what each move, trim or pause
// unmaps. A pause deregisters before its memory is unmapped; a move or trim of free memory (which
// holds no allocation) is deregistered just after, once the pool's locks are released.
//
// Unit (vmm_registration_unit): `handle` registers each physical handle on its own — NCCL before
// 2.29.2 registers only buffers of one cuMemCreate handle; `run` registers each run of handles
// mapped together (fewer, larger registrations; NCCL 2.29.2 and later). A run partly unmapped is
// deregistered and what stays mapped of it registered again.
//
// Errors: an exception from a callable is caught and counted (failures(), last_failure()), never
// thrown through the pool: a range whose registration failed stays unregistered.
// Invariant: registrations are disjoint and, when no callable failed, their union is exactly the
// pool's mapped memory (mapped_runs()).
// Thread safety: one mutex; the callables run under it, one at a time, on the thread that mapped
// or unmapped, and must not allocate from or free to the pool. Destroy (or close()) the
// registrar before the pool. The registrations follow the events in the order they arrive: when
// two threads change the pool at once (a growth on one, a trim on another), the pool may deliver
// their events in another order than it made the changes; a registration can then be missing,
// or left on memory given back, until the next change at that address.
#pragma once

#include <gpumem/mr/vmm_mapping_event.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace gpumem::mr {

class vmm_pool_memory_resource;

/// What one registration covers.
enum class vmm_registration_unit {
  handle,  ///< one physical handle (NCCL before 2.29.2)
  run,     ///< the handles one growth or resume mapped side by side (NCCL 2.29.2 and later)
};

class vmm_registrar {
 public:
  /// Registers [ptr, ptr + bytes); returns what the deregistration gets back.
  using register_fn = std::function<void*(void* ptr, std::size_t bytes)>;
  /// Ends the registration that register_fn returned `token` for.
  using deregister_fn = std::function<void(void* token)>;

  struct registration {
    void* ptr{};
    std::size_t bytes{};
    void* token{};
  };

  /// Registers what `pool` has mapped now and follows it from then on. Throws logic_error when a
  /// callable is empty.
  vmm_registrar(vmm_pool_memory_resource& pool, register_fn reg, deregister_fn dereg,
                vmm_registration_unit unit = vmm_registration_unit::handle);
  vmm_registrar(vmm_registrar const&)            = delete;
  vmm_registrar& operator=(vmm_registrar const&) = delete;
  /// close().
  ~vmm_registrar();

  /// Stops following the pool and deregisters everything (idempotent; never throws).
  void close() noexcept;
  [[nodiscard]] bool closed() const noexcept;
  /// The registrations now, in address order.
  [[nodiscard]] std::vector<registration> registrations() const;
  [[nodiscard]] vmm_registration_unit unit() const noexcept;
  /// Calls of each callable so far that returned, and exceptions they threw (caught).
  [[nodiscard]] std::uint64_t registered() const noexcept;
  [[nodiscard]] std::uint64_t deregistered() const noexcept;
  [[nodiscard]] std::uint64_t failures() const noexcept;
  /// What the last failing call threw ("" when none failed).
  [[nodiscard]] std::string last_failure() const;

 private:
  struct state;
  std::shared_ptr<state> state_;  // shared with the listeners: a call may outlive close()
  vmm_pool_memory_resource* pool_;
  vmm_listener_id on_map_{};
  vmm_listener_id on_unmap_{};
};

}  // namespace gpumem::mr
