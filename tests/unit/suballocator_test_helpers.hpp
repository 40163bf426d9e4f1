// Shared fixture pieces of the suballocator white-box tests: a host runtime and a leaf upstream.
#pragma once

#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>

#include <gtest/gtest.h>

#include <string>

namespace gpumem::test {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;

/// A host runtime (backed or simulated) and a cuda_memory_resource over it.
struct host_upstream {
  explicit host_upstream(bool backed = true, bool auto_complete = false)
      : rt{detail::host_runtime_options{.backed = backed, .auto_complete = auto_complete}}
  {
  }
  detail::host_runtime rt;
  mr::cuda_memory_resource cuda{rt};
};

/// The message of the exception `f` throws as E (empty, and a failure, when it throws nothing).
template <class E, class F>
std::string message_of(F&& f)
{
  try {
    f();
  } catch (E const& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception thrown";
  return {};
}

}  // namespace gpumem::test
