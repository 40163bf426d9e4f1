// compile-fail: CUB code may write bin_growth; our bins are fixed at construction, so the write
// must not compile (rather than be silently ignored). Built by tests/CMakeLists.txt and expected
// NOT to compile. With -DGPUMEM_COMPILE_FAIL_CONTROL the offending line is replaced by a valid one
// and the file compiles, so it fails for one reason.
//
// The compiler's error must match one of these (tests/compile_fail_check.cmake):
// expect-error: fixed at construction
#include <gpumem/caching_device_allocator.hpp>

void compile_fail_probe(gpumem::caching_device_allocator& a)
{
#ifdef GPUMEM_COMPILE_FAIL_CONTROL
  unsigned int growth = a.bin_growth;
  (void)growth;
#else
  a.bin_growth = 4;
#endif
}
