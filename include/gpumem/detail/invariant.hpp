// gpumem/detail/invariant.hpp — GPUMEM_INVARIANT, the check of an internal invariant (not API).
#pragma once

#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>

/// Throws logic_error "<resource>: invariant broken: <what>" when !cond; `what` is only built then.
/// An internal logic error: the message keeps the place in the sources (site_message).
#define GPUMEM_INVARIANT(cond, resource, what)                                                    \
  do {                                                                                            \
    if (!(cond)) [[unlikely]] {                                                                   \
      throw ::gpumem::logic_error{::gpumem::detail::site_message(                                 \
          __FILE__, __LINE__, ::gpumem::detail::format(resource, ": invariant broken: ", what))}; \
    }                                                                                             \
  } while (0)
