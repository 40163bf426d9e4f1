// gpumem/pool/vmm_ipc.hpp — deprecated: this header moved to <gpumem/ipc/vmm_ipc.hpp>, which it
// includes. Include the new path; this one forwards for one release and then goes away
// (CHANGELOG.md).
#pragma once

#include <gpumem/ipc/vmm_ipc.hpp>
