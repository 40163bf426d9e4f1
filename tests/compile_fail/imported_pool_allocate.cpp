// compile-fail: an imported pool cannot allocate (CUDA forbids it): there is no allocate member.
// Built by tests/CMakeLists.txt and expected NOT to compile. With -DGPUMEM_COMPILE_FAIL_CONTROL the
// offending line is replaced by a valid one and the file compiles, so it fails for one reason.
//
// The compiler's error must match one of these (tests/compile_fail_check.cmake):
// expect-error: imported_memory_pool. has no member named .allocate
// expect-error: no member named 'allocate' in 'gpumem::imported_memory_pool'
#include <gpumem/pool/ipc.hpp>

void compile_fail_probe(gpumem::imported_memory_pool const& pool)
{
#ifdef GPUMEM_COMPILE_FAIL_CONTROL
  (void)pool.usage_statistics();
#else
  (void)pool.allocate(256, gpumem::cuda_stream_view{});
#endif
}
