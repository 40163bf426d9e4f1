// Makers of the leaf resources for the conformance suite.
#pragma once

#include <conformance/conformance.hpp>

#include <gpumem/mr/callback_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/mr/sam_headroom_memory_resource.hpp>
#include <gpumem/mr/system_memory_resource.hpp>

namespace gpumem::test {

struct cuda_maker {
  static constexpr char const* name = "cuda";
  static constexpr bool thread_safe = true;
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    return std::make_shared<mr::cuda_memory_resource>(b.runtime());
  }
};

struct managed_maker {
  static constexpr char const* name   = "managed";
  static constexpr bool system_backed = true;  // unified memory may oversubscribe: never ask
                                               // a GPU for more than it has (it can hang)
  static constexpr bool thread_safe = true;
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    return std::make_shared<mr::managed_memory_resource>(b.runtime());
  }
};

struct system_maker {
  static constexpr char const* name   = "system";
  static constexpr bool system_backed = true;  // may exceed device memory
  static constexpr bool thread_safe   = true;
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    try {
      return std::make_shared<mr::system_memory_resource>(b.runtime());
    } catch (gpumem::logic_error const& e) {
      throw unsupported{e.what()};
    }
  }
};

struct sam_headroom_maker {
  static constexpr char const* name   = "sam_headroom";
  static constexpr bool system_backed = true;
  static constexpr bool thread_safe   = true;
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    try {
      return std::make_shared<mr::sam_headroom_memory_resource>(std::size_t{1} << 30, b.runtime());
    } catch (gpumem::logic_error const& e) {
      throw unsupported{e.what()};
    }
  }
};

/// A callback resource forwarding to a cuda_memory_resource.
struct callback_maker {
  static constexpr char const* name = "callback";
  static constexpr bool thread_safe = true;
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    auto stack     = std::make_shared<resource_stack>();
    auto& upstream = stack->push<mr::cuda_memory_resource>(b.runtime());
    auto& top      = stack->push<mr::callback_memory_resource>(
        [](std::size_t n, cuda_stream_view s, void* up) {
          return static_cast<mr::device_memory_resource*>(up)->allocate(n, s);
        },
        [](void* p, std::size_t n, cuda_stream_view s, void* up) {
          static_cast<mr::device_memory_resource*>(up)->deallocate(p, n, s);
        },
        &upstream, &upstream);
    return keep(stack, top);
  }
};

}  // namespace gpumem::test
