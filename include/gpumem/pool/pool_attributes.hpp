// gpumem/pool/pool_attributes.hpp — the typed attributes of a memory pool (CUDA's cudaMemPoolAttr
// values, read and written with get/set_attribute).
//
// Each attribute is a tag type carrying its value type and what may be done with it:
//   writable    set<A>(value) compiles (release threshold, the three reuse policies);
//   resettable  reset_high_water<A>() compiles; it sets the mark to zero, the only value CUDA
//               accepts (the mark then restarts from the current value);
//   otherwise   read-only: set<A> / reset_high_water<A> do not compile.
#pragma once

#include <gpumem/runtime.hpp>

#include <cuda_runtime_api.h>

#include <concepts>
#include <cstdint>

namespace gpumem::pools {

namespace pool_attr {

template <cudaMemPoolAttr Id, class T, bool Writable, bool Resettable>
struct attribute {
  using value_type                    = T;
  static constexpr cudaMemPoolAttr id = Id;
  static constexpr bool writable      = Writable;
  static constexpr bool resettable    = Resettable;
};

/// Bytes of reserved memory to keep before releasing to the OS at a synchronization (default 0).
struct release_threshold : attribute<cudaMemPoolAttrReleaseThreshold, std::uint64_t, true, false> {
};
/// Reuse memory freed on another stream when an event dependency orders the reuse (default on).
struct reuse_follow_event_dependencies
    : attribute<cudaMemPoolReuseFollowEventDependencies, bool, true, false> {};
/// Reuse memory whose free has already completed, without a dependency (default on).
struct reuse_allow_opportunistic
    : attribute<cudaMemPoolReuseAllowOpportunistic, bool, true, false> {};
/// Insert stream dependencies to reuse memory freed on another stream (default on).
struct reuse_allow_internal_dependencies
    : attribute<cudaMemPoolReuseAllowInternalDependencies, bool, true, false> {};
/// Backing memory currently reserved by the pool (read-only).
struct reserved_mem_current
    : attribute<cudaMemPoolAttrReservedMemCurrent, std::uint64_t, false, false> {};
/// High-water mark of reserved_mem_current since the last reset (reset to zero only).
struct reserved_mem_high : attribute<cudaMemPoolAttrReservedMemHigh, std::uint64_t, false, true> {};
/// Memory of the pool currently in use by the application (read-only).
struct used_mem_current : attribute<cudaMemPoolAttrUsedMemCurrent, std::uint64_t, false, false> {};
/// High-water mark of used_mem_current since the last reset (reset to zero only).
struct used_mem_high : attribute<cudaMemPoolAttrUsedMemHigh, std::uint64_t, false, true> {};

}  // namespace pool_attr

/// Any pool attribute tag.
template <class A>
concept pool_attribute = requires
{
  typename A::value_type;
  {
    A::id
    } -> std::convertible_to<cudaMemPoolAttr>;
  {
    A::writable
    } -> std::convertible_to<bool>;
  {
    A::resettable
    } -> std::convertible_to<bool>;
};

/// An attribute set<A>(value) accepts.
template <class A>
concept writable_pool_attribute = pool_attribute<A> && A::writable;

/// A high-water mark: reset_high_water<A>() accepts it.
template <class A>
concept high_water_attribute = pool_attribute<A> && A::resettable;

/// A read-only statistic (the only attributes meaningful on an imported pool).
template <class A>
concept pool_statistic = pool_attribute<A> && !A::writable;

/// The four usage statistics read together.
struct pool_usage_statistics {
  std::uint64_t reserved_bytes{};
  std::uint64_t reserved_high_bytes{};
  std::uint64_t used_bytes{};
  std::uint64_t used_high_bytes{};
};

}  // namespace gpumem::pools

// The earlier spellings: each name is also gpumem::<name> (the same entity).
namespace gpumem {
namespace pool_attr = pools::pool_attr;
using pools::high_water_attribute;
using pools::pool_attribute;
using pools::pool_statistic;
using pools::pool_usage_statistics;
using pools::writable_pool_attribute;
}  // namespace gpumem

namespace gpumem::detail {
// Bodies in src/pool/pool_attributes.cpp; throw cuda_error naming the attribute, logic_error on a
// null (moved-from) pool.
[[nodiscard]] std::uint64_t pool_get_u64(runtime& rt, cudaMemPool_t pool, cudaMemPoolAttr attr);
[[nodiscard]] bool pool_get_flag(runtime& rt, cudaMemPool_t pool, cudaMemPoolAttr attr);
void pool_set_u64(runtime& rt, cudaMemPool_t pool, cudaMemPoolAttr attr, std::uint64_t value);
void pool_set_flag(runtime& rt, cudaMemPool_t pool, cudaMemPoolAttr attr, bool value);
[[nodiscard]] char const* attribute_name(cudaMemPoolAttr attr) noexcept;

template <pool_attribute A>
[[nodiscard]] typename A::value_type pool_get(runtime& rt, cudaMemPool_t pool)
{
  if constexpr (std::same_as<typename A::value_type, bool>) {
    return pool_get_flag(rt, pool, A::id);
  } else {
    return pool_get_u64(rt, pool, A::id);
  }
}

template <writable_pool_attribute A>
void pool_set(runtime& rt, cudaMemPool_t pool, typename A::value_type value)
{
  if constexpr (std::same_as<typename A::value_type, bool>) {
    pool_set_flag(rt, pool, A::id, value);
  } else {
    pool_set_u64(rt, pool, A::id, value);
  }
}

[[nodiscard]] pool_usage_statistics pool_statistics(runtime& rt, cudaMemPool_t pool);
}  // namespace gpumem::detail
