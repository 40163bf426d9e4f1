// compile-fail: only high-water marks can be reset; reserved_mem_current cannot.
// Built by tests/CMakeLists.txt and expected NOT to compile. With -DGPUMEM_COMPILE_FAIL_CONTROL the
// offending line is replaced by a valid one and the file compiles, so it fails for one reason.
//
// The compiler's error must match one of these (tests/compile_fail_check.cmake):
// expect-error: call to .*reset_high_water<gpumem::pool_attr::reserved_mem_current>
// expect-error: no matching member function for call to 'reset_high_water'
#include <gpumem/pool/memory_pool_ref.hpp>

void compile_fail_probe(gpumem::memory_pool_ref pool)
{
#ifdef GPUMEM_COMPILE_FAIL_CONTROL
  pool.reset_high_water<gpumem::pool_attr::reserved_mem_high>();
#else
  pool.reset_high_water<gpumem::pool_attr::reserved_mem_current>();
#endif
}
