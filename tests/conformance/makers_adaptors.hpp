// Makers of the adaptors for the conformance suite: each adaptor over a suballocator (a pool over
// cuda_memory_resource; prefetch over a pool of managed memory), plus one deep stack of all.
#pragma once

#include <conformance/conformance.hpp>

#include <gpumem/mr/aligned_resource_adaptor.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/failure_callback_resource_adaptor.hpp>
#include <gpumem/mr/limiting_resource_adaptor.hpp>
#include <gpumem/mr/logging_resource_adaptor.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/mr/owning_wrapper.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/prefetch_resource_adaptor.hpp>
#include <gpumem/mr/statistics_resource_adaptor.hpp>
#include <gpumem/mr/thread_safe_resource_adaptor.hpp>
#include <gpumem/mr/tracking_resource_adaptor.hpp>

#include <sstream>

namespace gpumem::test {

/// The resource every adaptor maker stacks on: a pool (32 MiB to start, growing) over cuda.
using adaptor_base = mr::pool_memory_resource<mr::cuda_memory_resource>;

inline adaptor_base& push_adaptor_base(resource_stack& stack, backend& b)
{
  auto& cuda = stack.push<mr::cuda_memory_resource>(b.runtime());
  return stack.push<adaptor_base>(&cuda, std::size_t{32} << 20, std::nullopt, b.runtime());
}

/// A maker of the adaptor that Derived::push stacks on adaptor_base.
template <class Derived>
struct simple_adaptor_maker {
  static constexpr bool thread_safe = true;
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    auto stack = std::make_shared<resource_stack>();
    auto& base = push_adaptor_base(*stack, b);
    auto& top  = Derived::push(*stack, base, b);
    return keep(stack, top);
  }
};

struct aligned_maker : simple_adaptor_maker<aligned_maker> {
  static constexpr char const* name = "aligned";
  static auto& push(resource_stack& s, adaptor_base& base, backend&)
  {
    return s.push<mr::aligned_resource_adaptor<adaptor_base>>(&base, 4096, 4096);
  }
};

struct failure_callback_maker : simple_adaptor_maker<failure_callback_maker> {
  static constexpr char const* name = "failure_callback";
  static auto& push(resource_stack& s, adaptor_base& base, backend&)
  {
    return s.push<mr::failure_callback_resource_adaptor<adaptor_base>>(
        &base, [](std::size_t, void*) { return false; }, nullptr);
  }
};

struct limiting_maker : simple_adaptor_maker<limiting_maker> {
  static constexpr char const* name = "limiting";
  static auto& push(resource_stack& s, adaptor_base& base, backend&)
  {
    return s.push<mr::limiting_resource_adaptor<adaptor_base>>(&base, std::size_t{4} << 30);
  }
};

struct logging_maker : simple_adaptor_maker<logging_maker> {
  static constexpr char const* name = "logging";
  static auto& push(resource_stack& s, adaptor_base& base, backend&)
  {
    auto& log = s.push<std::ostringstream>();
    return s.push<mr::logging_resource_adaptor<adaptor_base>>(&base, log);
  }
};

struct statistics_maker : simple_adaptor_maker<statistics_maker> {
  static constexpr char const* name = "statistics";
  static auto& push(resource_stack& s, adaptor_base& base, backend&)
  {
    return s.push<mr::statistics_resource_adaptor<adaptor_base>>(&base);
  }
};

struct thread_safe_maker : simple_adaptor_maker<thread_safe_maker> {
  static constexpr char const* name = "thread_safe";
  static auto& push(resource_stack& s, adaptor_base& base, backend&)
  {
    return s.push<mr::thread_safe_resource_adaptor<adaptor_base>>(&base);
  }
};

struct tracking_maker : simple_adaptor_maker<tracking_maker> {
  static constexpr char const* name = "tracking";
  static auto& push(resource_stack& s, adaptor_base& base, backend&)
  {
    return s.push<mr::tracking_resource_adaptor<adaptor_base>>(&base, true);
  }
};

/// Prefetch is meant for managed memory: stacked over a pool of managed memory.
struct prefetch_maker {
  static constexpr char const* name   = "prefetch";
  static constexpr bool system_backed = true;  // unified memory may oversubscribe: never ask
                                               // a GPU for more than it has (it can hang)
  static constexpr bool thread_safe = true;
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    using managed_pool = mr::pool_memory_resource<mr::managed_memory_resource>;
    auto stack         = std::make_shared<resource_stack>();
    auto& managed      = stack->push<mr::managed_memory_resource>(b.runtime());
    auto& pool =
        stack->push<managed_pool>(&managed, std::size_t{32} << 20, std::nullopt, b.runtime());
    auto& top = stack->push<mr::prefetch_resource_adaptor<managed_pool>>(&pool, b.runtime());
    return keep(stack, top);
  }
};

struct owning_wrapper_maker {
  static constexpr char const* name = "owning_wrapper";
  static constexpr bool thread_safe = true;
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    auto cuda = std::make_shared<mr::cuda_memory_resource>(b.runtime());
    auto pool = mr::make_owning_wrapper<mr::pool_memory_resource>(cuda, std::size_t{32} << 20,
                                                                  std::nullopt, b.runtime());
    return mr::make_owning_wrapper<mr::statistics_resource_adaptor>(pool);
  }
};

/// Every adaptor at once, in an order different from the list above.
struct adaptor_stack_maker {
  static constexpr char const* name = "adaptor_stack";
  static constexpr bool thread_safe = true;
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    using namespace mr;
    auto stack = std::make_shared<resource_stack>();
    auto& log  = stack->push<std::ostringstream>();
    auto& base = push_adaptor_base(*stack, b);
    auto& ts   = stack->push<thread_safe_resource_adaptor<adaptor_base>>(&base);
    auto& al   = stack->push<aligned_resource_adaptor<device_memory_resource>>(&ts, 1024, 2048);
    auto& lim  = stack->push<limiting_resource_adaptor<device_memory_resource>>(&al, 1ULL << 32);
    auto& tr   = stack->push<tracking_resource_adaptor<device_memory_resource>>(&lim);
    auto& st   = stack->push<statistics_resource_adaptor<device_memory_resource>>(&tr);
    auto& fc   = stack->push<failure_callback_resource_adaptor<device_memory_resource>>(
        &st, [](std::size_t, void*) { return false; }, nullptr);
    auto& top = stack->push<logging_resource_adaptor<device_memory_resource>>(&fc, log);
    return keep(stack, top);
  }
};

}  // namespace gpumem::test
