// compile-fail: live_blocks is a read-only view: there is no clear() to forget live blocks.
// Built by tests/CMakeLists.txt and expected NOT to compile. With -DGPUMEM_COMPILE_FAIL_CONTROL the
// offending line is replaced by a valid one and the file compiles, so it fails for one reason.
//
// The compiler's error must match one of these (tests/compile_fail_check.cmake):
// expect-error: snapshot_field.* has no member named .clear
// expect-error: no member named 'clear' in .*snapshot_field
#include <gpumem/caching_device_allocator.hpp>

void compile_fail_probe(gpumem::caching_device_allocator& a)
{
#ifdef GPUMEM_COMPILE_FAIL_CONTROL
  bool none = a.live_blocks.empty();
  (void)none;
#else
  a.live_blocks.clear();
#endif
}
