// gpumem/mr/owning_wrapper.hpp — a resource that owns (shares) its upstreams.
//
// Resources do not own their upstreams; keeping a stack alive in the right order is the user's
// job. owning_wrapper<Resource, Upstreams...> holds shared_ptrs to the upstreams and the wrapped
// Resource built from their raw pointers (in tuple order) plus extra arguments, so the stack lives
// as long as the wrapper and the upstreams are destroyed after the wrapped resource. Prefer
// make_owning_wrapper:
//   auto cuda = std::make_shared<cuda_memory_resource>();
//   auto stats = make_owning_wrapper<statistics_resource_adaptor>(cuda);
//
// Thread safety: that of the wrapped resource.
// Throws: whatever Resource's constructor and allocate throw.
#pragma once

#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/resource_ref.hpp>

#include <cstddef>
#include <memory>
#include <tuple>
#include <utility>

namespace gpumem::mr {

template <typename Resource, typename... Upstreams>
class owning_wrapper
    : public device_memory_resource,
      public gpumem::detail::forward_properties<owning_wrapper<Resource, Upstreams...>, Resource> {
 public:
  using upstream_tuple = std::tuple<std::shared_ptr<Upstreams>...>;

  /// Builds Resource(upstream pointers..., args...).
  template <typename... Args>
  owning_wrapper(upstream_tuple upstreams, Args&&... args)
      : upstreams_{std::move(upstreams)},
        wrapped_{make_wrapped(std::index_sequence_for<Upstreams...>{}, std::forward<Args>(args)...)}
  {
  }

  owning_wrapper(owning_wrapper const&)            = delete;
  owning_wrapper& operator=(owning_wrapper const&) = delete;
  ~owning_wrapper() override                       = default;

  [[nodiscard]] Resource const& wrapped() const noexcept { return *wrapped_; }
  [[nodiscard]] Resource& wrapped() noexcept { return *wrapped_; }

  /// The shared upstreams, in the order the wrapped resource received them.
  [[nodiscard]] upstream_tuple const& upstream_resources() const noexcept { return upstreams_; }

  /// The wrapped resource, which every call is forwarded to.
  [[nodiscard]] device_async_resource_ref get_upstream_resource() const noexcept
  {
    return device_async_resource_ref{*wrapped_};
  }

 private:
  template <std::size_t... I, typename... Args>
  std::unique_ptr<Resource> make_wrapped(std::index_sequence<I...>, Args&&... args)
  {
    return std::make_unique<Resource>(std::get<I>(upstreams_).get()...,
                                      std::forward<Args>(args)...);
  }

  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    return wrapped_->allocate(bytes, stream);
  }

  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    wrapped_->deallocate(ptr, bytes, stream);
  }

  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override
  {
    if (this == &other) { return true; }
    if (auto const* o = dynamic_cast<owning_wrapper const*>(&other)) {
      return wrapped_->is_equal(*o->wrapped_);
    }
    return wrapped_->is_equal(other);
  }

  upstream_tuple upstreams_;           // declared first: destroyed after wrapped_
  std::unique_ptr<Resource> wrapped_;  // boxed: Resource need not be movable
};

/// owning_wrapper of Resource<Upstreams...> built from `upstreams` (raw pointers, in order) and
/// `args`.
template <template <typename...> class Resource, typename... Upstreams, typename... Args>
auto make_owning_wrapper(std::tuple<std::shared_ptr<Upstreams>...> upstreams, Args&&... args)
{
  return std::make_shared<owning_wrapper<Resource<Upstreams...>, Upstreams...>>(
      std::move(upstreams), std::forward<Args>(args)...);
}

/// The one-upstream form: make_owning_wrapper<statistics_resource_adaptor>(upstream, args...).
template <template <typename> class Resource, typename Upstream, typename... Args>
auto make_owning_wrapper(std::shared_ptr<Upstream> upstream, Args&&... args)
{
  return make_owning_wrapper<Resource, Upstream>(std::make_tuple(std::move(upstream)),
                                                 std::forward<Args>(args)...);
}

static_assert(gpumem::detail::async_resource_with<owning_wrapper<device_memory_resource>,
                                                  cuda::mr::device_accessible>);

}  // namespace gpumem::mr
