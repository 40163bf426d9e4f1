// gpumem/pool/fd_passing.hpp — deprecated: this header moved to <gpumem/ipc/fd_passing.hpp>, which
// it includes. Include the new path; this one forwards for one release and then goes away
// (CHANGELOG.md).
#pragma once

#include <gpumem/ipc/fd_passing.hpp>
