// Makers of arena_memory_resource and caching_memory_resource for the conformance suite.
#pragma once

#include <conformance/conformance.hpp>

#include <gpumem/mr/arena_memory_resource.hpp>
#include <gpumem/mr/caching_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>

#include <cstring>
#include <optional>

namespace gpumem::test {

/// Arena over cuda_memory_resource: 512 MiB on the host stand-in, the seed's default (half of
/// the free device memory) on a GPU.
struct arena_maker {
  static constexpr char const* name = "arena";
  static constexpr bool thread_safe = true;
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    auto stack      = std::make_shared<resource_stack>();
    auto& upstream  = stack->push<mr::cuda_memory_resource>(b.runtime());
    bool const host = std::strcmp(b.name(), "host") == 0;
    auto const size = host ? std::optional<std::size_t>{std::size_t{512} << 20} : std::nullopt;
    auto& top       = stack->push<mr::arena_memory_resource<mr::cuda_memory_resource>>(
        &upstream, size, false, b.runtime());
    return keep(stack, top);
  }
};

/// The caching allocator with the seed's defaults (8 / 3 / 7 / 6,291,455 B) over cudaMalloc.
struct caching_maker {
  static constexpr char const* name = "caching";
  static constexpr bool thread_safe = true;
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    auto stack     = std::make_shared<resource_stack>();
    auto& upstream = stack->push<mr::cuda_memory_resource>(b.runtime());
    auto& top      = stack->push<mr::caching_memory_resource>(
        &upstream, mr::caching_memory_resource_options{}, b.runtime());
    return keep(stack, top);
  }
};

}  // namespace gpumem::test
