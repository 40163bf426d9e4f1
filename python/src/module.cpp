// python/src/module.cpp — the gpumem._gpumem extension module: registers every binding file.
#include "bindings.hpp"

PYBIND11_MODULE(_gpumem, m)
{
  using namespace gpumem::python;
  m.doc() =
      "gpumem's C++ core: device memory resources (leaf, suballocators, adaptors), the per-device "
      "registry, CUDA memory pools and the host stand-in runtime. Import `gpumem`, not this "
      "module.";
  bind_errors(m);
  bind_runtime(m);
  bind_base(m);
  bind_leaf(m);
  bind_host(m);
  bind_registry(m);
  bind_suballocators(m);
  bind_regions(m);
  bind_registrar(m);
  bind_adaptors(m);
  bind_pools(m);
  bind_spec(m);
}
