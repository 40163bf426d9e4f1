// compile-fail: setting a read-only attribute (used_mem_current) does not compile.
// Built by tests/CMakeLists.txt and expected NOT to compile. With -DGPUMEM_COMPILE_FAIL_CONTROL the
// offending line is replaced by a valid one and the file compiles, so it fails for one reason.
//
// The compiler's error must match one of these (tests/compile_fail_check.cmake):
// expect-error: no matching function for call to .*set<gpumem::pool_attr::used_mem_current>
// expect-error: no matching member function for call to 'set'
#include <gpumem/pool/memory_pool_ref.hpp>

void compile_fail_probe(gpumem::memory_pool_ref pool)
{
#ifdef GPUMEM_COMPILE_FAIL_CONTROL
  pool.set<gpumem::pool_attr::release_threshold>(0);
#else
  pool.set<gpumem::pool_attr::used_mem_current>(0);
#endif
}
