// The per-device registry: gpumem's only mutable global. One mutex guards both maps; lookups are
// short (a map find), so contention is brief.
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>

#include <map>
#include <mutex>
#include <utility>

namespace gpumem::mr {
namespace {

struct registry {
  std::mutex mutex;
  std::map<int, device_memory_resource*> resources;
  std::map<int, device_async_resource_ref> refs;
};

registry& the_registry()
{
  static registry instance;  // constructed on first use, never destroyed before its users
  return instance;
}

device_memory_resource* initial_resource()
{
  static cuda_memory_resource mr{};
  return &mr;
}

device_memory_resource*& resource_slot(registry& r, int device)
{
  auto [it, inserted] = r.resources.try_emplace(device, initial_resource());
  return it->second;
}

device_async_resource_ref& ref_slot(registry& r, int device)
{
  auto it = r.refs.find(device);
  if (it == r.refs.end()) {
    it = r.refs.emplace(device, device_async_resource_ref{*initial_resource()}).first;
  }
  return it->second;
}

}  // namespace

device_memory_resource* get_per_device_resource(cuda_device_id device_id)
{
  auto& r = the_registry();
  std::lock_guard lock{r.mutex};
  return resource_slot(r, device_id.value());
}

device_memory_resource* set_per_device_resource(cuda_device_id device_id,
                                                device_memory_resource* new_mr)
{
  auto& r = the_registry();
  std::lock_guard lock{r.mutex};
  auto* const next               = new_mr == nullptr ? initial_resource() : new_mr;
  auto* const old                = std::exchange(resource_slot(r, device_id.value()), next);
  ref_slot(r, device_id.value()) = device_async_resource_ref{*next};
  return old;
}

device_memory_resource* get_current_device_resource()
{
  return get_per_device_resource(get_current_cuda_device());
}

device_memory_resource* set_current_device_resource(device_memory_resource* new_mr)
{
  return set_per_device_resource(get_current_cuda_device(), new_mr);
}

device_async_resource_ref get_per_device_resource_ref(cuda_device_id device_id)
{
  auto& r = the_registry();
  std::lock_guard lock{r.mutex};
  return ref_slot(r, device_id.value());
}

device_async_resource_ref set_per_device_resource_ref(cuda_device_id device_id,
                                                      device_async_resource_ref new_resource_ref)
{
  auto& r = the_registry();
  std::lock_guard lock{r.mutex};
  return std::exchange(ref_slot(r, device_id.value()), new_resource_ref);
}

device_async_resource_ref get_current_device_resource_ref()
{
  return get_per_device_resource_ref(get_current_cuda_device());
}

device_async_resource_ref set_current_device_resource_ref(
    device_async_resource_ref new_resource_ref)
{
  return set_per_device_resource_ref(get_current_cuda_device(), new_resource_ref);
}

device_async_resource_ref reset_per_device_resource_ref(cuda_device_id device_id)
{
  return set_per_device_resource_ref(device_id, device_async_resource_ref{*initial_resource()});
}

device_async_resource_ref reset_current_device_resource_ref()
{
  return reset_per_device_resource_ref(get_current_cuda_device());
}

}  // namespace gpumem::mr
