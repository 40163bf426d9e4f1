// Uses an installed gpumem: a resource over a simulated GPU (runs without a GPU), and the
// per-device registry. CI builds it through find_package, pkg-config and FetchContent.
#include <gpumem/gpumem.hpp>

#include <cstdio>

int main()
{
  gpumem::simulated_device sim;
  gpumem::mr::cuda_memory_resource mr{sim};
  void* p = mr.allocate(1 << 20);
  mr.deallocate(p, 1 << 20);
  auto* current = gpumem::mr::get_current_device_resource();
  std::printf("gpumem consumer: allocated and freed 1 MiB over the '%s' runtime; registry ok: %s\n",
              sim.name(), current != nullptr ? "yes" : "no");
  return current != nullptr ? 0 : 1;
}
