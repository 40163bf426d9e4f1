// gpumem/detail/runtime_leaf_resource.hpp — shared body of the leaf resources that take memory of
// one kind straight from the runtime (cuda_memory_resource, managed_memory_resource). Not API.
//
// Out-of-memory is rethrown as out_of_memory naming the resource, the request and the free memory.
// Thread safety: as thread-safe as the runtime (both runtimes are).
#pragma once

#include <gpumem/detail/runtime.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

namespace gpumem::detail {

/// Throws out_of_memory: "<who>: cannot allocate <bytes>: <free> free of <total> ...".
[[noreturn]] void throw_leaf_oom(char const* who, runtime& rt, std::size_t bytes,
                                 char const* cause);

template <memory_kind Kind>
class runtime_leaf_resource : public mr::device_memory_resource {
 public:
  explicit runtime_leaf_resource(runtime& rt) noexcept : runtime_{&rt} {}

  /// The runtime this resource allocates from.
  [[nodiscard]] runtime& get_runtime() const noexcept { return *runtime_; }

 protected:
  void* allocate_from_runtime(char const* who, std::size_t bytes)
  {
    try {
      return runtime_->allocate(Kind, bytes);
    } catch (out_of_memory const& e) {
      throw_leaf_oom(who, *runtime_, bytes, e.what());
    }
  }

 private:
  void do_deallocate(void* ptr, std::size_t, cuda_stream_view) noexcept override
  {
    runtime_->free(Kind, ptr);
  }

  runtime* runtime_;
};

}  // namespace gpumem::detail
