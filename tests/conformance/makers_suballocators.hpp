// Makers of the stream-ordered suballocators (pool, fixed_size, binning) for the conformance suite.
// Each sits on a cuda_memory_resource of the backend's runtime and uses that runtime for events.
#pragma once

#include <conformance/conformance.hpp>

#include <gpumem/mr/binning_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/fixed_size_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

namespace gpumem::test {

struct pool_maker {
  static constexpr char const* name = "pool";
  static constexpr bool thread_safe = true;
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    auto stack     = std::make_shared<resource_stack>();
    auto& upstream = stack->push<mr::cuda_memory_resource>(b.runtime());
    auto& top      = stack->push<mr::pool_memory_resource<mr::cuda_memory_resource>>(
        &upstream, std::size_t{32} << 20, std::nullopt, b.runtime());
    return keep(stack, top);
  }
};

/// The virtual-memory pool: 1 GiB of address space, backed on demand.
struct vmm_pool_maker {
  static constexpr char const* name = "vmm_pool";
  static constexpr bool thread_safe = true;
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    return std::make_shared<mr::vmm_pool_memory_resource>(
        mr::vmm_pool_options{.reserve_bytes = std::size_t{1} << 30}, b.runtime());
  }
};

/// fixed_size rejects requests above its block size; the suite asks for up to ~10 MiB, so the
/// blocks here are 16 MiB (4 per growth step).
struct fixed_size_maker {
  static constexpr char const* name = "fixed_size";
  static constexpr bool thread_safe = true;
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    auto stack     = std::make_shared<resource_stack>();
    auto& upstream = stack->push<mr::cuda_memory_resource>(b.runtime());
    auto& top      = stack->push<mr::fixed_size_memory_resource<mr::cuda_memory_resource>>(
        &upstream, std::size_t{16} << 20, std::size_t{4}, b.runtime());
    return keep(stack, top);
  }
};

/// Bins of 256 B .. 256 KiB (fixed_size, 128 blocks each); larger requests go upstream.
struct binning_maker {
  static constexpr char const* name = "binning";
  static constexpr bool thread_safe = true;
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    auto stack     = std::make_shared<resource_stack>();
    auto& upstream = stack->push<mr::cuda_memory_resource>(b.runtime());
    auto& top      = stack->push<mr::binning_memory_resource<mr::cuda_memory_resource>>(
        &upstream, std::int8_t{8}, std::int8_t{18}, b.runtime());
    return keep(stack, top);
  }
};

}  // namespace gpumem::test
