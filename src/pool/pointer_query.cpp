// query_pointer: the runtime's pointer attributes as a pointer_info.
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>
#include <gpumem/pool/pointer_query.hpp>

namespace gpumem::pools {

pointer_info query_pointer(void const* ptr, gpumem::runtime& rt)
{
  pointer_info info;
  auto const st =
      rt.pointer_attributes(ptr, &info.type, &info.device, &info.pool, &info.base, &info.size);
  if (st != cudaSuccess) {
    detail::throw_cuda_failure(st, detail::format("query_pointer(", ptr, ")"));
  }
  if (info.type == cudaMemoryTypeUnregistered) { return pointer_info{}; }
  return info;
}

}  // namespace gpumem::pools
