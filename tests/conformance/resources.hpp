// tests/conformance/resources.hpp — THE type list of the conformance suite.
// Adding a resource = one GPUMEM_BOTH(maker) line here (and its maker in a makers_*.hpp).
#pragma once

#include <conformance/makers_leaf.hpp>
#include <conformance/makers_adaptors.hpp>
#include <conformance/makers_arena_caching.hpp>
#include <conformance/makers_suballocators.hpp>
#include <conformance/makers_cuda_async.hpp>
#include <conformance/makers_thread_cache.hpp>

// Each maker runs over the host stand-in (CI) and over CUDA (skipped without a GPU).
#define GPUMEM_BOTH(maker)                                         \
  ::gpumem::test::config<::gpumem::test::host_backend_tag, maker>, \
      ::gpumem::test::config<::gpumem::test::cuda_backend_tag, maker>

namespace gpumem::test {

// clang-format off
using all_configs = ::testing::Types<
  GPUMEM_BOTH(cuda_maker),
  GPUMEM_BOTH(managed_maker),
  GPUMEM_BOTH(system_maker),
  GPUMEM_BOTH(sam_headroom_maker),
  GPUMEM_BOTH(cuda_async_maker),
  GPUMEM_BOTH(cuda_async_view_maker),
  GPUMEM_BOTH(pool_maker),
  GPUMEM_BOTH(vmm_pool_maker),
  GPUMEM_BOTH(fixed_size_maker),
  GPUMEM_BOTH(binning_maker),
  GPUMEM_BOTH(arena_maker),
  GPUMEM_BOTH(caching_maker),
  GPUMEM_BOTH(callback_maker),
  GPUMEM_BOTH(aligned_maker),
  GPUMEM_BOTH(failure_callback_maker),
  GPUMEM_BOTH(limiting_maker),
  GPUMEM_BOTH(logging_maker),
  GPUMEM_BOTH(prefetch_maker),
  GPUMEM_BOTH(statistics_maker),
  GPUMEM_BOTH(thread_safe_maker),
  GPUMEM_BOTH(tracking_maker),
  GPUMEM_BOTH(owning_wrapper_maker),
  GPUMEM_BOTH(thread_cache_pool_maker),
  GPUMEM_BOTH(thread_cache_arena_maker),
  GPUMEM_BOTH(thread_cache_vmm_pool_maker),
  GPUMEM_BOTH(adaptor_stack_maker)>;
// clang-format on

}  // namespace gpumem::test
