// Microbenchmarks of arena_memory_resource and the caching allocator (memory resource and drop-in)
// beside a cudaMalloc stand-in, all over a simulated device (host_runtime: simulated addresses,
// work completes at once). Host-side cost only: ratios are meaningful, absolute times are not GPU
// times. Workloads (../shared/BENCHMARKS.md): pair, random_small, threads (own stream per thread).
// Where a GPU is present, the same workloads also run on it ("gpu_" names) for arena, caching_mr
// and the peers cudaMalloc, cudaMallocAsync (default pool, release threshold at maximum) and CUB's
// CachingDeviceAllocator (defaults), in the same run.
#include <gpumem/caching_device_allocator.hpp>
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/arena_memory_resource.hpp>
#include <gpumem/mr/caching_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>

#include <benchmark/benchmark.h>
#include <cub/util_allocator.cuh>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace gpumem::bench {
namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;

/// The simulated device shared by every benchmark (80 GiB, like the H100).
struct device {
  detail::host_runtime rt{[] {
    detail::host_runtime_options o;
    o.backed        = false;
    o.auto_complete = true;
    return o;
  }()};
  mr::cuda_memory_resource cuda{rt};
  std::vector<cudaStream_t> streams;
  device()
  {
    for (int i = 0; i < 16; ++i) { streams.push_back(rt.create_stream()); }
  }
};

device& dev()
{
  static auto* d = new device{};  // lives for the whole run
  return *d;
}

/// A resource under test, as allocate/free on a stream.
struct subject {
  std::vector<cudaStream_t> const* streams{&dev().streams};  ///< stream i for thread i
  virtual ~subject()                                                  = default;
  virtual void* allocate(std::size_t bytes, cudaStream_t s)           = 0;
  virtual void deallocate(void* p, std::size_t bytes, cudaStream_t s) = 0;
};

struct resource_subject final : subject {
  explicit resource_subject(std::unique_ptr<mr::device_memory_resource> r) : mr{std::move(r)} {}
  void* allocate(std::size_t bytes, cudaStream_t s) override { return mr->allocate(bytes, s); }
  void deallocate(void* p, std::size_t bytes, cudaStream_t s) override
  {
    mr->deallocate(p, bytes, s);
  }
  std::unique_ptr<mr::device_memory_resource> mr;
};

struct dropin_subject final : subject {
  CachingDeviceAllocator alloc{false, false, dev().rt};
  void* allocate(std::size_t bytes, cudaStream_t s) override
  {
    void* p{};
    if (alloc.DeviceAllocate(&p, bytes, s) != cudaSuccess) { throw std::bad_alloc{}; }
    return p;
  }
  void deallocate(void* p, std::size_t, cudaStream_t) override { (void)alloc.DeviceFree(p); }
};

struct cuda_subject final : subject {
  void* allocate(std::size_t bytes, cudaStream_t s) override
  {
    return dev().cuda.allocate(bytes, s);
  }
  void deallocate(void* p, std::size_t bytes, cudaStream_t s) override
  {
    dev().cuda.deallocate(p, bytes, s);
  }
};

/// Real GPU streams (16, non-blocking); created on first use, never destroyed.
std::vector<cudaStream_t> const& gpu_streams()
{
  static auto* streams = [] {
    auto* v = new std::vector<cudaStream_t>(16);
    for (auto& s : *v) { (void)cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); }
    return v;
  }();
  return *streams;
}

struct gpu_cuda_subject final : subject {
  void* allocate(std::size_t bytes, cudaStream_t) override
  {
    void* p{};
    if (cudaMalloc(&p, bytes) != cudaSuccess) { throw std::bad_alloc{}; }
    return p;
  }
  void deallocate(void* p, std::size_t, cudaStream_t) override { (void)cudaFree(p); }
};

struct gpu_async_subject final : subject {
  gpu_async_subject()
  {
    cudaMemPool_t pool{};
    (void)cudaDeviceGetDefaultMemPool(&pool, 0);
    std::uint64_t threshold = UINT64_MAX;
    (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
  }
  void* allocate(std::size_t bytes, cudaStream_t s) override
  {
    void* p{};
    if (cudaMallocAsync(&p, bytes, s) != cudaSuccess) { throw std::bad_alloc{}; }
    return p;
  }
  void deallocate(void* p, std::size_t, cudaStream_t s) override { (void)cudaFreeAsync(p, s); }
};

struct gpu_cub_subject final : subject {
  cub::CachingDeviceAllocator alloc{true};  // skip_cleanup: lives until exit
  void* allocate(std::size_t bytes, cudaStream_t s) override
  {
    void* p{};
    if (alloc.DeviceAllocate(&p, bytes, s) != cudaSuccess) { throw std::bad_alloc{}; }
    return p;
  }
  void deallocate(void* p, std::size_t, cudaStream_t) override { (void)alloc.DeviceFree(p); }
};

bool gpu_present()
{
  int count{};
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return count > 0;
}

char const* const subjects[]     = {"cudaMalloc_sim", "arena", "caching_mr", "caching_dropin"};
char const* const gpu_subjects[] = {"gpu_cudaMalloc", "gpu_cudaMallocAsync", "gpu_cub_caching",
                                    "gpu_arena", "gpu_caching_mr"};

std::unique_ptr<subject> make_gpu(std::string const& name)
{
  static auto* cuda = new mr::cuda_memory_resource{};
  std::unique_ptr<subject> s;
  if (name == "gpu_arena") {
    s = std::make_unique<resource_subject>(
        std::make_unique<mr::arena_memory_resource<mr::cuda_memory_resource>>(cuda));
  } else if (name == "gpu_caching_mr") {
    s = std::make_unique<resource_subject>(std::make_unique<mr::caching_memory_resource>(cuda));
  } else if (name == "gpu_cudaMallocAsync") {
    s = std::make_unique<gpu_async_subject>();
  } else if (name == "gpu_cub_caching") {
    s = std::make_unique<gpu_cub_subject>();
  } else {
    s = std::make_unique<gpu_cuda_subject>();
  }
  s->streams = &gpu_streams();
  return s;
}

/// One instance of each subject for the whole run (thread benchmarks share it).
subject& get(std::string const& name)
{
  static std::mutex mutex;
  static auto& made = *new std::vector<std::pair<std::string, std::unique_ptr<subject>>>{};
  std::lock_guard lock{mutex};
  for (auto& [n, s] : made) {
    if (n == name) { return *s; }
  }
  std::unique_ptr<subject> s;
  if (name.starts_with("gpu_")) {
    s = make_gpu(name);
  } else if (name == "arena") {
    s = std::make_unique<resource_subject>(
        std::make_unique<mr::arena_memory_resource<mr::cuda_memory_resource>>(
            &dev().cuda, std::nullopt, false, dev().rt));
  } else if (name == "caching_mr") {
    s = std::make_unique<resource_subject>(std::make_unique<mr::caching_memory_resource>(
        &dev().cuda, mr::caching_memory_resource_options{}, dev().rt));
  } else if (name == "caching_dropin") {
    s = std::make_unique<dropin_subject>();
  } else {
    s = std::make_unique<cuda_subject>();
  }
  made.emplace_back(name, std::move(s));
  return *made.back().second;
}

void pair(benchmark::State& state, std::string const& name, std::size_t bytes)
{
  auto& s     = get(name);
  auto stream = (*s.streams)[0];
  for (auto _ : state) {
    void* p = s.allocate(bytes, stream);
    benchmark::DoNotOptimize(p);
    s.deallocate(p, bytes, stream);
  }
  state.SetItemsProcessed(state.iterations());
}

std::size_t log_uniform(std::mt19937_64& rng, std::size_t lo, std::size_t hi)
{
  std::uniform_real_distribution<double> d{std::log(static_cast<double>(lo)),
                                           std::log(static_cast<double>(hi))};
  return static_cast<std::size_t>(std::exp(d(rng)));
}

/// `ops` random operations, at most `max_live` live blocks of lo..hi bytes, on `stream`.
void random_ops(subject& s, cudaStream_t stream, std::mt19937_64& rng,
                std::vector<std::pair<void*, std::size_t>>& live, int ops, std::size_t max_live,
                std::size_t lo, std::size_t hi)
{
  for (int i = 0; i < ops; ++i) {
    if (live.size() < max_live && (live.empty() || rng() % 2 == 0)) {
      auto const n = log_uniform(rng, lo, hi);
      live.emplace_back(s.allocate(n, stream), n);
    } else {
      auto const k = rng() % live.size();
      s.deallocate(live[k].first, live[k].second, stream);
      live[k] = live.back();
      live.pop_back();
    }
  }
}

void drain(subject& s, cudaStream_t stream, std::vector<std::pair<void*, std::size_t>>& live)
{
  for (auto [p, n] : live) { s.deallocate(p, n, stream); }
  live.clear();
}

/// random_small: 200k ops in chunks of 1000 per iteration; sizes 256 B..4 MiB, <= 1000 live.
void random_small(benchmark::State& state, std::string const& name)
{
  auto& s = get(name);
  std::mt19937_64 rng{7};
  std::vector<std::pair<void*, std::size_t>> live;
  int done    = 0;
  auto stream = (*s.streams)[0];
  for (auto _ : state) {
    random_ops(s, stream, rng, live, 1000, 1000, 256, 4 * MiB);
    if ((done += 1000) >= 200000) {
      drain(s, stream, live);
      done = 0;
    }
  }
  drain(s, stream, live);
  state.SetItemsProcessed(state.iterations() * 1000);
}

/// threads: each thread its own stream, sizes 256 B..64 KiB, <= 64 live; aggregate ops/s.
void threads(benchmark::State& state, std::string const& name)
{
  auto& s     = get(name);
  auto stream = (*s.streams)[static_cast<std::size_t>(state.thread_index())];
  std::mt19937_64 rng{static_cast<std::uint64_t>(state.thread_index()) + 1};
  std::vector<std::pair<void*, std::size_t>> live;
  for (auto _ : state) { random_ops(s, stream, rng, live, 100, 64, 256, 64 * KiB); }
  drain(s, stream, live);
  state.SetItemsProcessed(state.iterations() * 100);
}

[[maybe_unused]] bool const registered = [] {
  std::size_t const sizes[] = {256, 4 * KiB, 64 * KiB, MiB, 16 * MiB, 256 * MiB};
  std::vector<std::string> names(std::begin(subjects), std::end(subjects));
  if (gpu_present()) {
    names.insert(names.end(), std::begin(gpu_subjects), std::end(gpu_subjects));
  }
  for (auto const& name : names) {
    for (auto bytes : sizes) {
      benchmark::RegisterBenchmark(("pair/" + name + "/" + std::to_string(bytes)).c_str(),
                                   [name, bytes](benchmark::State& st) { pair(st, name, bytes); });
    }
    benchmark::RegisterBenchmark(("random_small/" + name).c_str(),
                                 [name](benchmark::State& st) { random_small(st, name); });
    benchmark::RegisterBenchmark(("threads/" + name).c_str(),
                                 [name](benchmark::State& st) { threads(st, name); })
        ->Threads(1)
        ->Threads(2)
        ->Threads(4)
        ->Threads(8)
        ->Threads(16)
        ->UseRealTime();
  }
  return true;
}();

}  // namespace
}  // namespace gpumem::bench
