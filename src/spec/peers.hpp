// Makers of the peers (other libraries' allocators measured beside gpumem's); src/spec only.
#pragma once

#include <gpumem/spec/resource_factory.hpp>

namespace gpumem::spec::detail_peers {

/// cudaMallocAsync / cudaFreeAsync on the device's default pool, release threshold at maximum.
std::unique_ptr<mr::device_memory_resource> make_cuda_malloc_async(layer_args const&,
                                                                   mr::device_memory_resource*,
                                                                   build_context const&);
/// CUB's cub::CachingDeviceAllocator (toolkit header cub/util_allocator.cuh).
std::unique_ptr<mr::device_memory_resource> make_cub_caching(layer_args const&,
                                                             mr::device_memory_resource*,
                                                             build_context const&);

/// gpumem::mr::cuda_async_memory_resource, reporting its pool's reserved bytes as footprint.
std::unique_ptr<mr::device_memory_resource> make_cuda_async(layer_args const&,
                                                            mr::device_memory_resource*,
                                                            build_context const&);

}  // namespace gpumem::spec::detail_peers
