// gpumem/mr/thrust_allocator_adaptor.hpp — RMM's header name for thrust_allocator.
#pragma once

#include <gpumem/mr/thrust_allocator.hpp>
