// gpumem/trace/metered_runtime.hpp — deprecated: this header moved to
// <gpumem/runtime/metered_runtime.hpp>, which it includes. Include the new path; this one forwards
// for one release and then goes away (CHANGELOG.md).
#pragma once

#include <gpumem/runtime/metered_runtime.hpp>
