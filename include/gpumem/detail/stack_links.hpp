// gpumem/detail/stack_links.hpp — a resource's place in a stack: how deep it sits and how many
// resources are built over it. Held by device_memory_resource; an adaptor or
// suballocator links to its upstream when it is given one as a gpumem resource pointer.
//
// Lifetime rule: an upstream must outlive every resource built over it (destroy a stack from the
// top down, or let owning_wrapper own the upstream). Each resource counts the resources linked
// over it, and destroying one while that count is not zero prints what happened and aborts: the
// resources over it would otherwise use freed memory. The count is kept in every build, whatever
// NDEBUG says: a link is made by inline code (compiled with the consumer's flags) and undone by a
// destructor that may live in the library (compiled with the library's), so both sides must
// count alike. It costs one atomic add when a resource is built and one when it is destroyed;
// allocations do not touch it.
// Depth: a stack holds at most max_stack_depth resources. Each call goes down the whole stack on
// the calling thread's native stack, so a chain thousands deep would overflow it; linking a
// resource over an upstream that is already max_stack_depth deep throws logic_error.
// Only upstreams passed as a pointer to a gpumem resource are linked; one passed as a type-erased
// resource ref is not visible here (its depth counts as 1).
#pragma once

#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>

namespace gpumem {

/// The most resources one stack may hold (leaf included); far above any real stack.
inline constexpr std::size_t max_stack_depth = 100;

namespace detail {

/// What a resource knows of the resources over it. A copy is a new resource: nothing over it.
class stack_node {
 public:
  stack_node() = default;
  stack_node(stack_node const& other) noexcept : depth_{other.depth_} {}
  stack_node& operator=(stack_node const& other) noexcept
  {
    depth_ = other.depth_;
    return *this;
  }

  ~stack_node()
  {
    auto const n = dependents_.load(std::memory_order_acquire);
    if (n != 0) {
      std::fprintf(stderr,
                   "gpumem: a memory resource (at %p) was destroyed while %zu resource%s built "
                   "over it still exist%s; an upstream must outlive every resource built over "
                   "it (destroy a stack from the top down, or let owning_wrapper own the "
                   "upstream)\n",
                   static_cast<void*>(this), n, n == 1 ? "" : "s", n == 1 ? "s" : "");
      std::abort();
    }
  }

  [[nodiscard]] std::size_t depth() const noexcept { return depth_; }
  [[nodiscard]] std::size_t dependents() const noexcept
  {
    return dependents_.load(std::memory_order_relaxed);
  }

 private:
  friend class upstream_link;
  std::atomic<std::size_t> dependents_{0};  ///< resources linked over this one
  std::size_t depth_{1};                    ///< this resource and everything below it
};

/// A resource's link to its upstream's node: sets the depth, and counts it as a dependent for as
/// long as the link lives.
class upstream_link {
 public:
  upstream_link() = default;
  upstream_link(upstream_link const& other) noexcept : upstream_{other.upstream_} { add(); }
  upstream_link& operator=(upstream_link const& other) noexcept
  {
    if (this != &other) {
      remove();
      upstream_ = other.upstream_;
      add();
    }
    return *this;
  }
  ~upstream_link() { remove(); }

  /// Links `self` over `upstream`; throws logic_error when the stack would be too deep.
  void link(stack_node& self, stack_node& upstream)
  {
    GPUMEM_EXPECTS(upstream.depth_ < max_stack_depth, logic_error,
                   format("a stack may hold at most ", max_stack_depth,
                          " resources; this one would be ", upstream.depth_ + 1, " deep"));
    remove();
    self.depth_ = upstream.depth_ + 1;
    upstream_   = &upstream;
    add();
  }

 private:
  void add() noexcept
  {
    if (upstream_ != nullptr) { upstream_->dependents_.fetch_add(1, std::memory_order_relaxed); }
  }
  void remove() noexcept
  {
    if (upstream_ != nullptr) { upstream_->dependents_.fetch_sub(1, std::memory_order_release); }
  }

  stack_node* upstream_{nullptr};
};

}  // namespace detail
}  // namespace gpumem
