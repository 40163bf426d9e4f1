// gpumem/pool/owned_fd.hpp — deprecated: this header moved to <gpumem/ipc/owned_fd.hpp>, which it
// includes. Include the new path; this one forwards for one release and then goes away
// (CHANGELOG.md).
#pragma once

#include <gpumem/ipc/owned_fd.hpp>
