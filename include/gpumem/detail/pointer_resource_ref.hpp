// gpumem/detail/pointer_resource_ref.hpp — non-owning resource refs for CCCL 3.2 and newer.
//
// From CCCL 3.2 on, cuda::mr::resource_ref and any_resource only take copyable resources, and
// gpumem's pools, adaptors and virtual bases are not copyable. pointer_resource_ref<Base> is a
// cuda::mr::any_resource (or any_synchronous_resource) that holds a resource_pointer — a copyable
// pointer to the resource — so it has the meaning the ref aliases always had: it refers to the
// resource, copies refer to the same one, and the caller keeps the resource alive. Being an
// any_resource, it converts to cuda::mr::resource_ref and goes into CCCL containers as is.
// Included only by detail/cccl_compat.hpp.
#pragma once

#include <cuda/memory_resource>
#include <cuda/stream_ref>

#include <cstddef>
#include <type_traits>

namespace gpumem::detail {

/// A copyable pointer to a resource that forwards the resource's operations and stateless
/// properties. Two are equal when they point at resources that compare equal.
template <class Resource>
class resource_pointer {
 public:
  explicit resource_pointer(Resource& res) noexcept : res_{&res} {}

  void* allocate_sync(std::size_t bytes, std::size_t alignment)
  {
    return res_->allocate_sync(bytes, alignment);
  }

  void deallocate_sync(void* ptr, std::size_t bytes, std::size_t alignment) noexcept
  {
    res_->deallocate_sync(ptr, bytes, alignment);
  }

  void* allocate(::cuda::stream_ref stream, std::size_t bytes,
                 std::size_t alignment) requires ::cuda::mr::resource<Resource>
  {
    return res_->allocate(stream, bytes, alignment);
  }

  void deallocate(::cuda::stream_ref stream, void* ptr, std::size_t bytes,
                  std::size_t alignment) noexcept requires ::cuda::mr::resource<Resource>
  {
    res_->deallocate(stream, ptr, bytes, alignment);
  }

  bool operator==(resource_pointer const& other) const
  {
    return res_ == other.res_ || *res_ == *other.res_;
  }

  // clang-format off
  template <class Property>
    requires(!::cuda::property_with_value<Property> && ::cuda::has_property<Resource, Property>)
  friend constexpr void get_property(resource_pointer const&, Property) noexcept {}
  // clang-format on

 private:
  Resource* res_;  // never null
};

struct pointer_resource_ref_tag {};

/// True for the resources a ref over `Base` may point at: those with the base's operations and
/// properties, other than gpumem's refs themselves (which are copied instead).
/// (The cheap checks come first: they keep the converting constructor from being examined for
/// every type that meets a ref in an overload set.)
// clang-format off
template <class Base, class Resource>
concept pointable_by =
    !std::is_base_of_v<pointer_resource_ref_tag, std::remove_cv_t<Resource>> &&
    requires(Resource& res, std::size_t n) { res.allocate_sync(n, n); } &&
    std::is_constructible_v<Base, resource_pointer<Resource>>;
// clang-format on

/// A non-owning ref: `Base` (an any_resource type) holding a resource_pointer.
template <class Base>
class pointer_resource_ref : public Base, private pointer_resource_ref_tag {
 public:
  // clang-format off
  template <class Resource>
    requires pointable_by<Base, Resource>
  pointer_resource_ref(Resource& res)  // NOLINT: implicit, as cuda::mr::resource_ref's
      : Base{resource_pointer<Resource>{res}}
  {
  }

  /// From another ref with at least these properties (and, for a synchronous ref, from a
  /// stream-ordered one).
  template <class OtherBase>
    requires(!std::is_same_v<OtherBase, Base> && std::is_constructible_v<Base, OtherBase const&>)
  pointer_resource_ref(pointer_resource_ref<OtherBase> const& other)  // NOLINT: implicit
      : Base{static_cast<OtherBase const&>(other)}
  {
  }
  // clang-format on

  // Copies only: a moved-from ref still refers to its resource (no move members declared).
  pointer_resource_ref(pointer_resource_ref const&)            = default;
  pointer_resource_ref& operator=(pointer_resource_ref const&) = default;
  ~pointer_resource_ref()                                      = default;

  bool operator==(pointer_resource_ref const& other) const
  {
    return static_cast<Base const&>(*this) == static_cast<Base const&>(other);
  }
};

}  // namespace gpumem::detail
