// compile-fail: max_bin_bytes follows from the bins (fixed at construction): a write must not
// compile. Built by tests/CMakeLists.txt and expected NOT to compile. With
// -DGPUMEM_COMPILE_FAIL_CONTROL the offending line is replaced by a valid one and the file
// compiles, so it fails for one reason.
//
// The compiler's error must match one of these (tests/compile_fail_check.cmake):
// expect-error: fixed at construction
#include <gpumem/caching_device_allocator.hpp>

void compile_fail_probe(gpumem::caching_device_allocator& a)
{
#ifdef GPUMEM_COMPILE_FAIL_CONTROL
  std::size_t hi = a.max_bin_bytes;
  (void)hi;
#else
  a.max_bin_bytes = 1 << 20;
#endif
}
