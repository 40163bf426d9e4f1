// compile-fail: cached_bytes is a read-only view: editing a device's totals must not compile.
// Built by tests/CMakeLists.txt and expected NOT to compile. With -DGPUMEM_COMPILE_FAIL_CONTROL the
// offending line is replaced by a valid one and the file compiles, so it fails for one reason.
//
// The compiler's error must match one of these (tests/compile_fail_check.cmake):
// expect-error: assignment of member .*TotalBytes::free. in read-only object
// expect-error: error: expression is not assignable
#include <gpumem/caching_device_allocator.hpp>

void compile_fail_probe(gpumem::caching_device_allocator& a)
{
#ifdef GPUMEM_COMPILE_FAIL_CONTROL
  std::size_t freed = a.cached_bytes[0].free;
  (void)freed;
#else
  a.cached_bytes[0].free = 0;
#endif
}
