// compile-fail: an imported pool does not convert to memory_pool_ref (so it cannot be made current
// or allocated from). Built by tests/CMakeLists.txt and expected NOT to compile. With
// -DGPUMEM_COMPILE_FAIL_CONTROL the offending line is replaced by a valid one and the file
// compiles, so it fails for one reason.
//
// The compiler's error must match one of these (tests/compile_fail_check.cmake):
// expect-error: conversion from .const gpumem::pools::imported_memory_pool. to non-scalar type
// expect-error: no viable conversion from 'const gpumem::pools::imported_memory_pool'
#include <gpumem/pool/ipc.hpp>

void compile_fail_probe(gpumem::imported_memory_pool const& pool)
{
#ifdef GPUMEM_COMPILE_FAIL_CONTROL
  (void)pool.handle();
#else
  gpumem::memory_pool_ref ref = pool;
  (void)ref;
#endif
}
