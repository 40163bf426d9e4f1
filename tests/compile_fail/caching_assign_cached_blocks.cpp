// compile-fail: cached_blocks is a read-only view: assigning a set to it must not compile.
// Built by tests/CMakeLists.txt and expected NOT to compile. With -DGPUMEM_COMPILE_FAIL_CONTROL the
// offending line is replaced by a valid one and the file compiles, so it fails for one reason.
//
// The compiler's error must match one of these (tests/compile_fail_check.cmake):
// expect-error: are read-only views of the allocator's bookkeeping
#include <gpumem/caching_device_allocator.hpp>

void compile_fail_probe(gpumem::caching_device_allocator& a)
{
#ifdef GPUMEM_COMPILE_FAIL_CONTROL
  gpumem::caching_device_allocator::CachedBlocks copy = a.cached_blocks();
  (void)copy;
#else
  a.cached_blocks = gpumem::caching_device_allocator::CachedBlocks{};
#endif
}
