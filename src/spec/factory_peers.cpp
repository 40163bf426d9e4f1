// The peers: the CUDA driver's stream-ordered pool and CUB's caching allocator, driven directly
// (these bypass gpumem::runtime by design: they ARE the other libraries being compared).
#include "peers.hpp"

#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>

#include <cub/util_allocator.cuh>

#include <gpumem/mr/cuda_async_memory_resource.hpp>

#include <cstdint>
#include <limits>
#include <optional>

namespace gpumem::spec::detail_peers {
namespace {

[[noreturn]] void throw_peer(char const* who, std::size_t bytes, cudaError_t status)
{
  auto const msg = detail::format(who, ": cannot allocate ", detail::bytes_str(bytes), ": ",
                                  cudaGetErrorName(status));
  if (status == cudaErrorMemoryAllocation) { throw out_of_memory{msg}; }
  throw cuda_error{status, msg};
}

class cuda_malloc_async_peer final : public mr::device_memory_resource, public footprint_source {
 public:
  cuda_malloc_async_peer()
  {
    int device = 0;
    GPUMEM_CUDA_TRY(cudaGetDevice(&device));
    GPUMEM_CUDA_TRY(cudaDeviceGetDefaultMemPool(&pool_, device));
    std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();
    GPUMEM_CUDA_TRY(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
    trim();
  }
  ~cuda_malloc_async_peer() override { trim(); }
  cuda_malloc_async_peer(cuda_malloc_async_peer const&)            = delete;
  cuda_malloc_async_peer& operator=(cuda_malloc_async_peer const&) = delete;

  [[nodiscard]] std::size_t held_bytes() const override
  {
    std::uint64_t reserved = 0;
    GPUMEM_CUDA_TRY_NOEXCEPT(
        cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &reserved));
    return reserved;
  }

 private:
  void trim() noexcept
  {
    GPUMEM_CUDA_TRY_NOEXCEPT(cudaDeviceSynchronize());
    GPUMEM_CUDA_TRY_NOEXCEPT(cudaMemPoolTrimTo(pool_, 0));
  }
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    void* p           = nullptr;
    auto const status = cudaMallocAsync(&p, bytes, stream.value());
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      throw_peer("cuda_malloc_async", bytes, status);
    }
    return p;
  }
  void do_deallocate(void* p, std::size_t, cuda_stream_view stream) noexcept override
  {
    GPUMEM_CUDA_TRY_NOEXCEPT(cudaFreeAsync(p, stream.value()));
  }

  cudaMemPool_t pool_{};
};

class cub_caching_peer final : public mr::device_memory_resource, public footprint_source {
 public:
  cub_caching_peer(unsigned growth, unsigned min_bin, unsigned max_bin, std::size_t max_cached)
      : cub_{growth, min_bin, max_bin, max_cached}
  {
  }

  [[nodiscard]] std::size_t held_bytes() const override
  {
    int device = 0;
    GPUMEM_CUDA_TRY_NOEXCEPT(cudaGetDevice(&device));
    auto const it = cub_.cached_bytes.find(device);
    return it == cub_.cached_bytes.end() ? 0 : it->second.free + it->second.live;
  }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    void* p           = nullptr;
    auto const status = cub_.DeviceAllocate(&p, bytes, stream.value());
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      throw_peer("cub_caching", bytes, status);
    }
    return p;
  }
  void do_deallocate(void* p, std::size_t, cuda_stream_view) noexcept override
  {
    GPUMEM_CUDA_TRY_NOEXCEPT(cub_.DeviceFree(p));
  }

  cub::CachingDeviceAllocator cub_;
};

class cuda_async_layer final : public mr::device_memory_resource, public footprint_source {
 public:
  cuda_async_layer(std::optional<std::size_t> initial, std::optional<std::size_t> threshold)
      : r_{initial, threshold}
  {
  }
  [[nodiscard]] std::size_t held_bytes() const override
  {
    std::uint64_t reserved = 0;
    GPUMEM_CUDA_TRY_NOEXCEPT(
        cudaMemPoolGetAttribute(r_.pool_handle(), cudaMemPoolAttrReservedMemCurrent, &reserved));
    return reserved;
  }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view s) override
  {
    return r_.allocate(bytes, s);
  }
  void do_deallocate(void* p, std::size_t bytes, cuda_stream_view s) noexcept override
  {
    r_.deallocate(p, bytes, s);
  }
  mr::cuda_async_memory_resource r_;
};

std::optional<std::size_t> optional_size(layer_args const& a, char const* key)
{
  if (a.text(key) == "none") { return std::nullopt; }
  return a.bytes(key, 0, most_device_bytes);
}

unsigned bin_param(layer_args const& args, char const* key)
{
  if (args.text(key) == "max") { return cub::CachingDeviceAllocator::INVALID_BIN; }
  return static_cast<unsigned>(args.count(key, 0xfffffffeU));
}

}  // namespace

std::unique_ptr<mr::device_memory_resource> make_cuda_malloc_async(layer_args const&,
                                                                   mr::device_memory_resource*,
                                                                   build_context const&)
{
  return std::make_unique<cuda_malloc_async_peer>();
}

std::unique_ptr<mr::device_memory_resource> make_cub_caching(layer_args const& args,
                                                             mr::device_memory_resource*,
                                                             build_context const&)
{
  auto const max_cached = args.text("max_cached") == "max"
                              ? cub::CachingDeviceAllocator::INVALID_SIZE
                              : args.bytes("max_cached");
  return std::make_unique<cub_caching_peer>(bin_param(args, "bin_growth"),
                                            bin_param(args, "min_bin"), bin_param(args, "max_bin"),
                                            max_cached);
}

std::unique_ptr<mr::device_memory_resource> make_cuda_async(layer_args const& args,
                                                            mr::device_memory_resource*,
                                                            build_context const&)
{
  return std::make_unique<cuda_async_layer>(optional_size(args, "initial"),
                                            optional_size(args, "release_threshold"));
}

}  // namespace gpumem::spec::detail_peers
