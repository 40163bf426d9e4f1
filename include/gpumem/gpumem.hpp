// gpumem/gpumem.hpp — umbrella header: every public resource, adaptor and vocabulary header
// (includes only). Not included: mr/thrust_allocator.hpp and mr/thrust_allocator_adaptor.hpp, which
// need Thrust (include them where Thrust is available).
#pragma once

#include <gpumem/align.hpp>
#include <gpumem/caching_device_allocator.hpp>
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/aligned_resource_adaptor.hpp>
#include <gpumem/mr/arena_memory_resource.hpp>
#include <gpumem/mr/binning_memory_resource.hpp>
#include <gpumem/mr/caching_memory_resource.hpp>
#include <gpumem/mr/callback_memory_resource.hpp>
#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/cuda_async_view_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/failure_callback_resource_adaptor.hpp>
#include <gpumem/mr/fixed_size_memory_resource.hpp>
#include <gpumem/mr/host_memory_resource.hpp>
#include <gpumem/mr/is_resource_adaptor.hpp>
#include <gpumem/mr/limiting_resource_adaptor.hpp>
#include <gpumem/mr/logging_resource_adaptor.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/mr/new_delete_resource.hpp>
#include <gpumem/mr/owning_wrapper.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/mr/pinned_host_memory_resource.hpp>
#include <gpumem/mr/pinned_memory_resource.hpp>
#include <gpumem/mr/polymorphic_allocator.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/prefetch_resource_adaptor.hpp>
#include <gpumem/mr/sam_headroom_memory_resource.hpp>
#include <gpumem/mr/statistics_resource_adaptor.hpp>
#include <gpumem/mr/stream_allocator_adaptor.hpp>
#include <gpumem/mr/system_memory_resource.hpp>
#include <gpumem/mr/thread_safe_resource_adaptor.hpp>
#include <gpumem/mr/tracking_resource_adaptor.hpp>
#include <gpumem/mr/thread_cache_resource_adaptor.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>
#include <gpumem/pool/device_pools.hpp>
#include <gpumem/pool/ipc.hpp>
#include <gpumem/pool/memory_pool.hpp>
#include <gpumem/pool/memory_pool_ref.hpp>
#include <gpumem/resource_ref.hpp>
#include <gpumem/simulated_device.hpp>
