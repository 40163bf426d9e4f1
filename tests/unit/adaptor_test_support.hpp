// Shared by the adaptor unit tests: a host_runtime with a cuda_memory_resource over it, so
// upstream failures can be injected (fail_next_allocations) and usage read back (used_bytes).
#pragma once

#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/is_resource_adaptor.hpp>

#include <gtest/gtest.h>

namespace gpumem::test {

class host_upstream : public ::testing::Test {
 protected:
  detail::host_runtime rt{};
  mr::cuda_memory_resource base{rt};
};

}  // namespace gpumem::test
