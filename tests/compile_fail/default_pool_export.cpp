// compile-fail: a device's default pool cannot be exported (it is not IPC-capable):
// default_pool() gives a memory_pool_ref, which has no export_handle member.
// Built by tests/CMakeLists.txt and expected NOT to compile. With -DGPUMEM_COMPILE_FAIL_CONTROL the
// offending line is replaced by a valid one and the file compiles, so it fails for one reason.
//
// The compiler's error must match one of these (tests/compile_fail_check.cmake):
// expect-error: memory_pool_ref. has no member named .export_handle
// expect-error: no member named 'export_handle' in 'gpumem::memory_pool_ref'
#include <gpumem/pool/device_pools.hpp>

void compile_fail_probe()
{
  auto const pool = gpumem::default_pool(gpumem::cuda_device_id{0});
#ifdef GPUMEM_COMPILE_FAIL_CONTROL
  (void)pool.usage_statistics();
#else
  (void)pool.export_handle();
#endif
}
