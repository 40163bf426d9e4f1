// compile-fail: skip_cleanup is `const bool` as in CUB: a write must not compile.
// Built by tests/CMakeLists.txt and expected NOT to compile. With -DGPUMEM_COMPILE_FAIL_CONTROL the
// offending line is replaced by a valid one and the file compiles, so it fails for one reason.
//
// The compiler's error must match one of these (tests/compile_fail_check.cmake):
// expect-error: assignment of read-only member .*caching_device_allocator::skip_cleanup
// expect-error: 'skip_cleanup' with const-qualified type
#include <gpumem/caching_device_allocator.hpp>

void compile_fail_probe(gpumem::caching_device_allocator& a)
{
#ifdef GPUMEM_COMPILE_FAIL_CONTROL
  bool skip = a.skip_cleanup;
  (void)skip;
#else
  a.skip_cleanup = true;
#endif
}
