// python/src/nccl_registrar.hpp — a vmm_registrar whose callables are NCCL's C functions (or any
// with their signatures), called without Python: what gpumem.torch.nccl_registration builds, in
// the bindings (gpumem.VmmRegistrar) and in the PyTorch allocator library (mem_pool()'s pools).
//
//   int register(void* comm, void* buffer, size_t bytes, void** handle);   // ncclCommRegister
//   int deregister(void* comm, void* handle);                               // ncclCommDeregister
//
// A non-zero result is a failure (ncclResult_t), counted by the registrar with the function's
// name and result in last_failure().
#pragma once

#include <gpumem/error.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>
#include <gpumem/mr/vmm_registrar.hpp>

#include <cstddef>
#include <memory>
#include <string>

namespace gpumem::python {

using nccl_register_fn   = int (*)(void* comm, void* buffer, std::size_t bytes, void** handle);
using nccl_deregister_fn = int (*)(void* comm, void* handle);

/// "handle" or "run"; logic_error naming the accepted values otherwise.
[[nodiscard]] inline mr::vmm_registration_unit registration_unit(std::string const& name)
{
  if (name == "handle") { return mr::vmm_registration_unit::handle; }
  if (name == "run") { return mr::vmm_registration_unit::run; }
  throw logic_error{
      "the registration unit is 'handle' (one registration per physical handle, "
      "NCCL before 2.29.2) or 'run' (NCCL 2.29.2 and later), not '" +
      name + "'"};
}

[[nodiscard]] inline std::unique_ptr<mr::vmm_registrar> make_nccl_registrar(
    mr::vmm_pool_memory_resource& pool, void* comm, nccl_register_fn reg, nccl_deregister_fn dereg,
    mr::vmm_registration_unit unit)
{
  if (reg == nullptr || dereg == nullptr) {
    throw logic_error{"the register and deregister functions must not be null"};
  }
  return std::make_unique<mr::vmm_registrar>(
      pool,
      [comm, reg](void* p, std::size_t n) -> void* {
        void* handle{};
        if (int const rc = reg(comm, p, n, &handle); rc != 0) {
          throw logic_error{"the register function (ncclCommRegister) returned " +
                            std::to_string(rc)};
        }
        return handle;
      },
      [comm, dereg](void* handle) {
        if (int const rc = dereg(comm, handle); rc != 0) {
          throw logic_error{"the deregister function (ncclCommDeregister) returned " +
                            std::to_string(rc)};
        }
      },
      unit);
}

}  // namespace gpumem::python
