// gpumem/detail/runtime.hpp — the runtime seam's names inside the library (not API): the seam
// itself is public, in <gpumem/runtime.hpp>; the library's own code spells it detail::runtime.
#pragma once

#include <gpumem/runtime.hpp>

namespace gpumem::detail {

using gpumem::mem_info;
using gpumem::mem_location;
using gpumem::memory_kind;
using gpumem::runtime;
using gpumem::to_string;
using gpumem::vmm_handle;

}  // namespace gpumem::detail
