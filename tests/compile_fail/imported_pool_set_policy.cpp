// compile-fail: reuse policies mean nothing on an imported pool: only statistics can be read.
// Built by tests/CMakeLists.txt and expected NOT to compile. With -DGPUMEM_COMPILE_FAIL_CONTROL the
// offending line is replaced by a valid one and the file compiles, so it fails for one reason.
//
// The compiler's error must match one of these (tests/compile_fail_check.cmake):
// expect-error: function for call to .*get<gpumem::pool_attr::reuse_allow_opportunistic>
// expect-error: no matching member function for call to 'get'
#include <gpumem/pool/ipc.hpp>

void compile_fail_probe(gpumem::imported_memory_pool const& pool)
{
#ifdef GPUMEM_COMPILE_FAIL_CONTROL
  (void)pool.get<gpumem::pool_attr::used_mem_current>();
#else
  (void)pool.get<gpumem::pool_attr::reuse_allow_opportunistic>();
#endif
}
