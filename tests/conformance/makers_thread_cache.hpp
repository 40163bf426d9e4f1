// Makers of the per-thread cache for the conformance suite: thread_cache over a pool, an arena
// (each over cuda_memory_resource) and the virtual-memory pool, built as their own makers do.
#pragma once

#include <conformance/conformance.hpp>

#include <gpumem/mr/arena_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/thread_cache_resource_adaptor.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <cstring>
#include <optional>

namespace gpumem::test {

struct thread_cache_pool_maker {
  static constexpr char const* name = "thread_cache_pool";
  static constexpr bool thread_safe = true;
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    using pool_mr  = mr::pool_memory_resource<mr::cuda_memory_resource>;
    auto stack     = std::make_shared<resource_stack>();
    auto& upstream = stack->push<mr::cuda_memory_resource>(b.runtime());
    auto& pool = stack->push<pool_mr>(&upstream, std::size_t{32} << 20, std::nullopt, b.runtime());
    return keep(stack, stack->push<mr::thread_cache_resource_adaptor<pool_mr>>(&pool));
  }
};

struct thread_cache_arena_maker {
  static constexpr char const* name = "thread_cache_arena";
  static constexpr bool thread_safe = true;
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    using arena_mr  = mr::arena_memory_resource<mr::cuda_memory_resource>;
    auto stack      = std::make_shared<resource_stack>();
    auto& upstream  = stack->push<mr::cuda_memory_resource>(b.runtime());
    bool const host = std::strcmp(b.name(), "host") == 0;
    auto const size = host ? std::optional<std::size_t>{std::size_t{512} << 20} : std::nullopt;
    auto& arena     = stack->push<arena_mr>(&upstream, size, false, b.runtime());
    return keep(stack, stack->push<mr::thread_cache_resource_adaptor<arena_mr>>(&arena));
  }
};

struct thread_cache_vmm_pool_maker {
  static constexpr char const* name = "thread_cache_vmm_pool";
  static constexpr bool thread_safe = true;
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    using vmm_mr = mr::vmm_pool_memory_resource;
    auto stack   = std::make_shared<resource_stack>();
    auto& vmm    = stack->push<vmm_mr>(mr::vmm_pool_options{.reserve_bytes = std::size_t{1} << 30},
                                    b.runtime());
    return keep(stack, stack->push<mr::thread_cache_resource_adaptor<vmm_mr>>(&vmm));
  }
};

}  // namespace gpumem::test
