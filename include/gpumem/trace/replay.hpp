// gpumem/trace/replay.hpp — deprecated: this header moved to <gpumem/replay/replay.hpp>, which it
// includes. Include the new path; this one forwards for one release and then goes away
// (CHANGELOG.md).
#pragma once

#include <gpumem/replay/replay.hpp>
