// gpumem/detail/pinned_host.hpp — the bodies of pinned_host_memory_resource and
// pinned_memory_resource over any runtime, so that the host stand-in runs them. Not API.
// A non-power-of-two alignment falls back to RMM_DEFAULT_HOST_ALIGNMENT (host resources' rule).
// Throws out_of_memory when the runtime reports exhaustion, bad_alloc for any other failure.
#pragma once

#include <gpumem/detail/runtime.hpp>

#include <cstddef>

namespace gpumem::detail {

/// `bytes` (> 0) of pinned host memory aligned to `alignment`; `who` names the resource in errors.
[[nodiscard]] void* pinned_host_allocate(runtime& rt, char const* who, std::size_t bytes,
                                         std::size_t alignment);

/// Frees `ptr` from pinned_host_allocate(rt, ..., alignment).
void pinned_host_deallocate(runtime& rt, void* ptr, std::size_t alignment) noexcept;

}  // namespace gpumem::detail
