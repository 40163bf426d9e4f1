#include <gpumem/gpumem.hpp>

#include <cstdio>
#include <optional>

int main()
{
  // A simulated GPU, so that this runs anywhere. On a GPU, leave out `sim` (and the `sim`
  // arguments): every resource then uses the real CUDA runtime.
  gpumem::simulated_device sim;
  gpumem::mr::cuda_memory_resource cuda{sim};

  // A 64 MiB pool that grows as needed, with statistics on top.
  using pool_t = gpumem::mr::pool_memory_resource<gpumem::mr::cuda_memory_resource>;
  pool_t pool{&cuda, 64 << 20, std::nullopt, sim};
  gpumem::mr::statistics_resource_adaptor<pool_t> stats{&pool};

  gpumem::cuda_stream_view stream{};          // the default stream
  void* p = stats.allocate(1 << 20, stream);  // usable on `stream` at once
  stats.deallocate(p, 1 << 20, stream);       // reusable on `stream` at once

  std::printf("peak %lld bytes in use; the pool holds %zu bytes\n",
              static_cast<long long>(stats.get_bytes_counter().peak), pool.pool_size());
  return 0;
}
