// tests/support/resource_stack.hpp — keep a stack of resources alive as one shared_ptr to its top.
// Push the lowest (upstream) resource first; destruction runs top first.
#pragma once

#include <gpumem/mr/device_memory_resource.hpp>

#include <memory>
#include <stdexcept>
#include <vector>

namespace gpumem::test {

/// Thrown by a maker when the resource cannot exist on this backend (reason in what()).
struct unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class resource_stack {
 public:
  template <class R, class... Args>
  R& push(Args&&... args)
  {
    auto r = std::make_shared<R>(std::forward<Args>(args)...);
    layers_.push_back(r);
    return *r;
  }
  ~resource_stack()
  {
    while (!layers_.empty()) { layers_.pop_back(); }
  }

 private:
  std::vector<std::shared_ptr<void>> layers_;
};

/// A shared_ptr to `top` that keeps the whole stack alive.
inline std::shared_ptr<mr::device_memory_resource> keep(std::shared_ptr<resource_stack> stack,
                                                        mr::device_memory_resource& top)
{
  return {std::move(stack), &top};
}

}  // namespace gpumem::test
