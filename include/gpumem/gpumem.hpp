// gpumem/gpumem.hpp — umbrella header of the foundation (includes only).
#pragma once

#include <gpumem/align.hpp>
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/callback_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/host_memory_resource.hpp>
#include <gpumem/mr/is_resource_adaptor.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/mr/new_delete_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/mr/pinned_host_memory_resource.hpp>
#include <gpumem/mr/pinned_memory_resource.hpp>
#include <gpumem/mr/sam_headroom_memory_resource.hpp>
#include <gpumem/mr/system_memory_resource.hpp>
#include <gpumem/resource_ref.hpp>
