// gpumem/simulated_device.hpp — run resources over a simulated GPU, without one.
//
//   gpumem::simulated_device sim;                       // 80 GiB of simulated device memory
//   gpumem::mr::cuda_memory_resource cuda{sim};          // every resource takes a runtime
//   gpumem::mr::pool_memory_resource<gpumem::mr::cuda_memory_resource> pool{&cuda, 1 << 20,
//                                                                            std::nullopt, sim};
//
// Every resource takes the runtime it runs over as its last constructor argument (default: the
// real CUDA runtime, gpumem::cuda_device()). A simulated_device models device memory, streams
// and events on the host, deterministically: work put on a simulated stream (create_stream,
// enqueue) stays pending until complete() or complete_all(), so that stream-ordering behaviour
// can be tested and replayed on any machine. With `backed = false` its memory is address space
// only (nothing may be written to it), which is how the gpumem tool replays traces of any size.
// Thread safety: every member may be called from any thread.
#pragma once

#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/runtime.hpp>

namespace gpumem {

/// The runtime seam (<gpumem/runtime.hpp>), by its earlier name.
using device_runtime = runtime;

/// A simulated GPU on the host; see the file comment.
using simulated_device = detail::host_runtime;

/// capacity_bytes (default 80 GiB), backed (true: real host memory behind the addresses),
/// auto_complete (true: streams finish their work at once), granularity_bytes (256),
/// device_count (1).
using simulated_device_options = detail::host_runtime_options;

}  // namespace gpumem
