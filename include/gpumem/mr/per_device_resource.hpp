// gpumem/mr/per_device_resource.hpp — the per-device resource registry.
//
// For each device, the resource used by default. The initial resource of every device is a
// cuda_memory_resource. The registry is the only mutable global of gpumem (defined in
// src/mr/per_device_resource.cpp). All functions are thread-safe under concurrent calls: each
// leaves a valid state, in an unspecified order. The caller owns the resources it sets and keeps
// them alive while they are set. A resource must be used only while its device is current.
//
// Two views: raw pointers (get/set_per_device_resource) and resource refs (the *_ref family).
// Setting a pointer sets both views; setting a ref sets the ref view only; a null pointer or a
// reset restores the initial resource.
#pragma once

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/resource_ref.hpp>

namespace gpumem::mr {

/// The resource of `device_id`.
device_memory_resource* get_per_device_resource(cuda_device_id device_id);
/// Sets the resource of `device_id` (nullptr: the initial resource); returns the previous one.
device_memory_resource* set_per_device_resource(cuda_device_id device_id,
                                                device_memory_resource* new_mr);
/// The resource of the calling thread's current device.
device_memory_resource* get_current_device_resource();
/// Sets the resource of the current device; returns the previous one.
device_memory_resource* set_current_device_resource(device_memory_resource* new_mr);

device_async_resource_ref get_per_device_resource_ref(cuda_device_id device_id);
device_async_resource_ref set_per_device_resource_ref(cuda_device_id device_id,
                                                      device_async_resource_ref new_resource_ref);
device_async_resource_ref get_current_device_resource_ref();
device_async_resource_ref set_current_device_resource_ref(
    device_async_resource_ref new_resource_ref);
/// Restores the initial resource of `device_id`; returns the previous ref.
device_async_resource_ref reset_per_device_resource_ref(cuda_device_id device_id);
device_async_resource_ref reset_current_device_resource_ref();

}  // namespace gpumem::mr
