// compile-fail: memory_pool owns its pool and is move-only: copying does not compile.
// Built by tests/CMakeLists.txt and expected NOT to compile. With -DGPUMEM_COMPILE_FAIL_CONTROL the
// offending line is replaced by a valid one and the file compiles, so it fails for one reason.
//
// The compiler's error must match one of these (tests/compile_fail_check.cmake):
// expect-error: deleted function .gpumem::pools::memory_pool::memory_pool.const gpumem::pools
// expect-error: call to deleted constructor of 'gpumem::pools::memory_pool'
#include <gpumem/pool/memory_pool.hpp>

void compile_fail_probe(gpumem::memory_pool& pool)
{
#ifdef GPUMEM_COMPILE_FAIL_CONTROL
  gpumem::memory_pool moved{std::move(pool)};
#else
  gpumem::memory_pool copy{pool};
#endif
}
