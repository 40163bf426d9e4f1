// gpumem/mr/is_resource_adaptor.hpp — true for types that expose get_upstream_resource().
#pragma once

#include <type_traits>
#include <utility>

namespace gpumem::mr {

template <class Resource, class = void>
inline constexpr bool is_resource_adaptor = false;

template <class Resource>
inline constexpr bool is_resource_adaptor<
    Resource, std::void_t<decltype(std::declval<Resource const&>().get_upstream_resource())>> =
    true;

}  // namespace gpumem::mr
