// The memory-pool API on a real GPU: attributes, statistics, trimming, default/current pools,
// host and managed pools, clear errors for bad handles, cuda_async defaults, a two-process IPC
// test (this executable re-runs itself as the importer) and a two-GPU access test.
// Skips without a GPU; the two-GPU tests skip with a reason on one GPU.
#include <support/backend.hpp>
#include <support/child_process.hpp>

#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/pool/device_pools.hpp>
#include <gpumem/ipc/fd_passing.hpp>
#include <gpumem/pool/ipc.hpp>
#include <gpumem/pool/memory_pool.hpp>
#include <gpumem/pool/pool_capabilities.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpumem {
namespace {

#define EXPECT_HAS(text, sub)                                                       \
  do {                                                                              \
    std::string const gpumem_text_{text};                                           \
    EXPECT_NE(gpumem_text_.find(sub), std::string::npos) << "in: " << gpumem_text_; \
  } while (0)

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

constexpr std::size_t mib = std::size_t{1} << 20;

__device__ __host__ std::uint32_t pattern(std::size_t i, std::uint32_t seed)
{
  return static_cast<std::uint32_t>(i) * 2654435761U ^ seed;
}

__global__ void write_pattern(std::uint32_t* p, std::size_t n, std::uint32_t seed)
{
  for (auto i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    p[i] = pattern(i, seed);
  }
}

__global__ void count_mismatches(std::uint32_t const* p, std::size_t n, std::uint32_t seed,
                                 unsigned long long* out)
{
  for (auto i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    if (p[i] != pattern(i, seed)) { atomicAdd(out, 1ULL); }
  }
}

/// A non-blocking stream on the current device, destroyed at scope end.
struct stream {
  cudaStream_t s{};
  stream() { (void)cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); }
  ~stream() { (void)cudaStreamDestroy(s); }
  operator cuda_stream_view() const { return s; }  // NOLINT
};

/// Fills `bytes` at p with the pattern on `s`.
void fill(void* p, std::size_t bytes, std::uint32_t seed, cudaStream_t s)
{
  write_pattern<<<128, 256, 0, s>>>(static_cast<std::uint32_t*>(p), bytes / 4, seed);
}

/// Mismatches of the pattern at p, counted by a kernel on `s` (device of the current context).
unsigned long long mismatches(void const* p, std::size_t bytes, std::uint32_t seed, cudaStream_t s)
{
  unsigned long long* d{};
  unsigned long long h{~0ULL};
  if (cudaMallocAsync(reinterpret_cast<void**>(&d), sizeof *d, s) != cudaSuccess) { return h; }
  (void)cudaMemsetAsync(d, 0, sizeof *d, s);
  count_mismatches<<<128, 256, 0, s>>>(static_cast<std::uint32_t const*>(p), bytes / 4, seed, d);
  (void)cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, s);
  (void)cudaFreeAsync(d, s);
  (void)cudaStreamSynchronize(s);
  return h;
}

memory_pool device_pool(int device = 0, handle_type_set handles = {})
{
  return memory_pool{{.location = pool_location::device(device), .handle_types = handles}};
}

TEST(gpu_pool, capabilities_are_reported)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto const c = query_pool_capabilities(cuda_device_id{0});
  EXPECT_TRUE(c.device_unusable_reason.empty()) << c.device_unusable_reason;
  EXPECT_TRUE(c.pools_supported);
  EXPECT_TRUE(c.supported_handle_types.contains(allocation_handle_type::posix_file_descriptor));
  std::cout << "driver " << c.driver_version << " runtime " << c.runtime_version << " devices "
            << c.device_count << " handle types " << to_string(c.supported_handle_types)
            << " host pools " << c.host_pools_supported << " host NUMA pools "
            << c.host_numa_pools_supported << " managed access " << c.concurrent_managed_access_all
            << " fabric: "
            << (c.fabric_unavailable_reason.empty() ? "usable" : c.fabric_unavailable_reason)
            << "\n";
}

TEST(gpu_pool, every_attribute_round_trips)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto pool = device_pool();
  EXPECT_EQ(pool.get<pool_attr::release_threshold>(), 0U);  // CUDA's default
  for (std::uint64_t v : {std::uint64_t{1} << 30, std::uint64_t{12345}, UINT64_MAX}) {
    pool.set<pool_attr::release_threshold>(v);
    EXPECT_EQ(pool.get<pool_attr::release_threshold>(), v);
  }
  for (bool v : {false, true}) {
    pool.set<pool_attr::reuse_follow_event_dependencies>(v);
    pool.set<pool_attr::reuse_allow_opportunistic>(v);
    pool.set<pool_attr::reuse_allow_internal_dependencies>(v);
    EXPECT_EQ(pool.get<pool_attr::reuse_follow_event_dependencies>(), v);
    EXPECT_EQ(pool.get<pool_attr::reuse_allow_opportunistic>(), v);
    EXPECT_EQ(pool.get<pool_attr::reuse_allow_internal_dependencies>(), v);
  }
  EXPECT_EQ(pool.get<pool_attr::reserved_mem_current>(), 0U);
  EXPECT_EQ(pool.get<pool_attr::used_mem_current>(), 0U);
  pool.reset_high_water<pool_attr::reserved_mem_high>();
  pool.reset_high_water<pool_attr::used_mem_high>();
  EXPECT_EQ(pool.get<pool_attr::reserved_mem_high>(), 0U);
  EXPECT_EQ(pool.get<pool_attr::used_mem_high>(), 0U);
}

TEST(gpu_pool, statistics_track_allocations)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto pool = device_pool();
  pool.set<pool_attr::release_threshold>(UINT64_MAX);
  stream s;
  std::vector<void*> ptrs;
  for (int i = 0; i < 3; ++i) { ptrs.push_back(pool.allocate(4 * mib, s)); }
  auto st = pool.usage_statistics();
  EXPECT_GE(st.used_bytes, 12 * mib);
  EXPECT_GE(st.reserved_bytes, st.used_bytes);
  EXPECT_GE(st.used_high_bytes, st.used_bytes);
  EXPECT_GE(st.reserved_high_bytes, st.reserved_bytes);
  for (auto* p : ptrs) { pool.deallocate(p, s); }
  CUDA_OK(cudaStreamSynchronize(s.s));
  st = pool.usage_statistics();
  EXPECT_EQ(st.used_bytes, 0U);
  EXPECT_GE(st.used_high_bytes, 12 * mib);
  EXPECT_GE(st.reserved_bytes, 12 * mib);  // kept: threshold is max
  pool.reset_high_water_marks();
  st = pool.usage_statistics();
  EXPECT_EQ(st.used_high_bytes, 0U);  // restarts from the current value (0)
  EXPECT_GE(st.reserved_high_bytes, 12 * mib) << "reserved high restarts from reserved current";
}

TEST(gpu_pool, trim_releases_reserved_memory)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto pool = device_pool();
  pool.set<pool_attr::release_threshold>(UINT64_MAX);
  stream s;
  void* p = pool.allocate(64 * mib, s);
  pool.deallocate(p, s);
  CUDA_OK(cudaStreamSynchronize(s.s));
  auto const before = pool.get<pool_attr::reserved_mem_current>();
  EXPECT_GE(before, 64 * mib);
  pool.trim_to(0);
  auto const after = pool.get<pool_attr::reserved_mem_current>();
  std::cout << "reserved before trim " << before << " after trim_to(0) " << after << "\n";
  EXPECT_LT(after, before);
  EXPECT_EQ(after, 0U);
}

TEST(gpu_pool, zero_release_threshold_shrinks_at_synchronize)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto pool = device_pool();
  stream s;
  pool.deallocate(pool.allocate(32 * mib, s), s);
  CUDA_OK(cudaStreamSynchronize(s.s));
  EXPECT_EQ(pool.get<pool_attr::reserved_mem_current>(), 0U);
}

TEST(gpu_pool, allocation_on_a_stream_is_usable_by_a_kernel)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto pool = device_pool();
  stream s;
  void* p = pool.allocate(8 * mib, s);
  fill(p, 8 * mib, 7, s.s);
  EXPECT_EQ(mismatches(p, 8 * mib, 7, s.s), 0U);
  EXPECT_GT(mismatches(p, 8 * mib, 8, s.s), 0U);  // the check can fail
  pool.deallocate(p, s);
  CUDA_OK(cudaStreamSynchronize(s.s));
}

TEST(gpu_pool, default_and_current_pool_with_scoped_guard)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  cuda_device_id const dev{0};
  auto const def = default_pool(dev);
  EXPECT_TRUE(current_pool(dev) == def);
  auto pool = device_pool();
  stream s;
  {
    scoped_current_pool guard{dev, pool};
    EXPECT_TRUE(current_pool(dev) == pool.ref());
    EXPECT_TRUE(guard.previous() == def);
    void* p{};
    CUDA_OK(cudaMallocAsync(&p, 2 * mib, s.s));  // no pool named: the current one
    EXPECT_GE(pool.get<pool_attr::used_mem_current>(), 2 * mib);
    CUDA_OK(cudaFreeAsync(p, s.s));
    CUDA_OK(cudaStreamSynchronize(s.s));
  }
  EXPECT_TRUE(current_pool(dev) == def);
  EXPECT_THROW(set_current_pool(dev, memory_pool_ref{def.handle(), pool_location::device(1)}),
               logic_error);
}

TEST(gpu_pool, access_of_own_device_and_bad_devices)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto pool = device_pool();
  EXPECT_EQ(pool.access(cuda_device_id{0}), access_flags::read_write);
  EXPECT_NO_THROW(pool.set_access(cuda_device_id{0}, access_flags::read_write));
  try {
    pool.set_access(cuda_device_id{get_num_cuda_devices()});
    FAIL() << "access for a device that does not exist";
  } catch (logic_error const& e) {
    EXPECT_HAS(e.what(), "does not exist");
  }
  EXPECT_THROW(pool.set_access(cuda_device_id{0}, access_flags::read), logic_error);
}

TEST(gpu_pool, creation_failures_are_diagnosed)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  int const n = get_num_cuda_devices();
  try {
    (void)device_pool(n);
    FAIL() << "pool on a device that does not exist";
  } catch (cuda_error const& e) {
    EXPECT_EQ(e.status(), cudaErrorNotSupported);
    EXPECT_HAS(e.what(), "does not exist");
  }
  auto const fabric_why = why_fabric_unavailable();
  if (fabric_why.empty()) { GTEST_SKIP() << "fabric is usable here; nothing to refuse"; }
  try {
    (void)device_pool(0, allocation_handle_type::fabric);
    FAIL() << "fabric pool created without IMEX channels";
  } catch (cuda_error const& e) {
    EXPECT_HAS(e.what(), "IMEX");
    std::cout << "fabric refusal: " << e.what() << "\n";
  }
}

TEST(gpu_pool, fabric_export)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto const why = why_fabric_unavailable();
  if (!why.empty()) { GTEST_SKIP() << "fabric handles unavailable: " << why; }
  auto pool   = device_pool(0, allocation_handle_type::fabric);
  auto handle = pool.export_handle(allocation_handle_type::fabric);
  EXPECT_EQ(handle.type(), allocation_handle_type::fabric);
}

TEST(gpu_pool, bad_handles_and_misuse_give_clear_errors)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto plain = device_pool();
  try {
    (void)plain.export_handle();
    FAIL();
  } catch (logic_error const& e) {
    EXPECT_HAS(e.what(), "created with handle types {none}");
  }
  stream s;
  EXPECT_THROW((void)exported_allocation(plain, mib, s), logic_error);
  EXPECT_THROW(imported_memory_pool{shareable_pool_handle{owned_fd{}}}, logic_error);
  owned_fd devnull{::open("/dev/null", O_RDONLY | O_CLOEXEC)};
  int const raw = devnull.get();
  try {
    imported_memory_pool bad{shareable_pool_handle{std::move(devnull)}};
    FAIL() << "imported a pool from /dev/null";
  } catch (cuda_error const& e) {
    EXPECT_HAS(e.what(), "cannot import a memory pool from file descriptor " + std::to_string(raw));
  }
  try {
    (void)ipc_event::open(ipc_event_handle{});
    FAIL() << "opened an all-zero IPC event handle";
  } catch (cuda_error const& e) {
    EXPECT_HAS(e.what(), "cannot open IPC event handle");
  }
  memory_pool moved{std::move(plain)};
  EXPECT_THROW((void)plain.get<pool_attr::used_mem_current>(), logic_error);  // NOLINT
  EXPECT_THROW((void)plain.allocate(1, s), logic_error);                      // NOLINT
}

TEST(gpu_pool, exported_allocation_frees_unshared_and_refuses_shared)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto pool = device_pool(0, allocation_handle_type::posix_file_descriptor);
  stream s;
  exported_allocation a{pool, mib, s};
  a.free_unshared(s);
  exported_allocation b{pool, mib, s};
  EXPECT_FALSE(pool.exported());
  try {  // phase 2 before phase 1: driver 580 refuses it; the error must say what to do
    (void)b.export_data();
  } catch (cuda_error const& e) {
    EXPECT_HAS(e.what(), "share the pool first");
  }
  auto handle = pool.export_handle();  // phase 1: share the pool...
  EXPECT_TRUE(pool.exported());
  (void)b.export_data();  // ...then its allocations
  EXPECT_THROW(b.free_unshared(s), logic_error);
  auto ev = ipc_event::create();
  ev.record(s);  // stands in for the importer's free
  b.free_after(ev, s);
  CUDA_OK(cudaStreamSynchronize(s.s));
  EXPECT_EQ(pool.get<pool_attr::used_mem_current>(), 0U);
}

TEST(gpu_pool, host_pool_when_supported)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto const c = query_pool_capabilities(cuda_device_id{0});
  if (!c.host_pools_supported) { GTEST_SKIP() << "host pools unsupported on this device/driver"; }
  memory_pool pool{{.location = pool_location::host()}};
  stream s;
  auto* p = static_cast<unsigned char*>(pool.allocate(mib, s));
  CUDA_OK(cudaStreamSynchronize(s.s));
  std::memset(p, 0x5a, mib);  // host-accessible by default
  EXPECT_EQ(p[mib - 1], 0x5a);
  pool.deallocate(p, s);
  CUDA_OK(cudaStreamSynchronize(s.s));
}

TEST(gpu_pool, small_managed_pool_when_supported)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto const c = query_pool_capabilities(cuda_device_id{0});
  if (!c.concurrent_managed_access_all || c.driver_version < managed_pools_min_driver) {
    GTEST_SKIP() << "managed pools need concurrentManagedAccess and driver 13.0";
  }
  memory_pool pool{
      {.location = pool_location::device(0), .allocation_type = pool_allocation_type::managed}};
  stream s;
  void* p = pool.allocate(mib, s);
  fill(p, mib, 3, s.s);
  CUDA_OK(cudaStreamSynchronize(s.s));
  EXPECT_EQ(static_cast<std::uint32_t*>(p)[5], pattern(5, 3));  // host reads managed memory
  pool.deallocate(p, s);
  CUDA_OK(cudaStreamSynchronize(s.s));
}

TEST(gpu_cuda_async, defaults_follow_the_seed)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  std::size_t free{}, total{};
  CUDA_OK(cudaMemGetInfo(&free, &total));
  mr::cuda_async_memory_resource mr{};
  EXPECT_EQ(mr.pool().get<pool_attr::release_threshold>(), total);
  EXPECT_GE(mr.pool().get<pool_attr::reserved_mem_current>(), free / 2 - 64 * mib);
  EXPECT_TRUE(mr.pool().properties().handle_types.empty());
  mr::cuda_async_memory_resource small{64 * mib, 0, allocation_handle_type::posix_file_descriptor};
  EXPECT_EQ(small.pool().get<pool_attr::release_threshold>(), 0U);
  auto h = small.pool().export_handle();
  EXPECT_GE(h.fd(), 0);
  EXPECT_FALSE(mr == small);
}

// -- two processes ---------------------------------------------------------------------------

constexpr char const* socket_env = "GPUMEM_POOL_IPC_SOCKET";
constexpr std::size_t ipc_bytes  = 16 * mib;
constexpr std::uint32_t ipc_seed = 0xC0FFEE;

struct export_message {
  pointer_export_data data;
  ipc_event_handle ready;
  std::uint64_t bytes;
  std::uint32_t seed;
  std::int32_t home;  ///< the exporter's pool device
};
struct import_reply {
  ipc_event_handle freed;
  unsigned long long mismatches;
  std::uint64_t imported_used_bytes;
  std::int32_t bad_data_rejected;
  std::int32_t status;  // 0 ok
  char error[512];
};

using test::bytes_of;

void run_importer(int sock, import_reply& reply)
{
  export_message m{};
  shareable_pool_handle handle{receive_with_fd(sock, bytes_of(m))};
  imported_memory_pool pool{handle};
  // The home device is found at import (the only device with access), not guessed: with the pool
  // on device 1, device 0 (the lowest) must be given access to read it below.
  if (pool.location() != std::optional{pool_location::device(m.home)}) {
    throw std::runtime_error{"the imported pool's home device was not found as device " +
                             std::to_string(m.home)};
  }
  pool.set_access(cuda_device_id{0});  // peer access when home is 1; a no-op for the owner
  try {
    (void)pool.import_pointer(pointer_export_data{}, 1);
  } catch (cuda_error const&) {
    reply.bad_data_rejected = 1;
  }
  auto alloc = pool.import_pointer(m.data, m.bytes);
  auto ready = ipc_event::open(m.ready);
  stream s;
  ready.make_wait(s);  // the exporter's pattern is written before we read
  reply.mismatches = mismatches(alloc.get(), m.bytes, m.seed, s.s);
  try {  // driver 580 refuses statistics on imported pools (cudaErrorInvalidValue): note it
    reply.imported_used_bytes = pool.get<pool_attr::used_mem_current>();
  } catch (cuda_error const&) {
    reply.imported_used_bytes = UINT64_MAX;
  }
  auto freed = ipc_event::create();
  alloc.free_async(s, freed);  // the importer frees first and signals
  reply.freed = freed.handle();
  send_with_fd(sock, bytes_of(reply));
  std::uint32_t done{};
  (void)receive_with_fd(sock, bytes_of(done));  // keep `freed` alive until the exporter waited
}

TEST(gpu_pool_ipc, importer_role)
{
  char const* env = std::getenv(socket_env);
  if (env == nullptr) { GTEST_SKIP() << "runs only as the child of gpu_pool_ipc.two_processes"; }
  int const sock = std::atoi(env);
  import_reply reply{};
  try {
    run_importer(sock, reply);
  } catch (std::exception const& e) {
    reply.status = 1;
    std::snprintf(reply.error, sizeof reply.error, "%s", e.what());
    send_with_fd(sock, bytes_of(reply));
    FAIL() << e.what();
  }
}

/// Starts this executable again as the importer, with `child_sock` inherited.
pid_t spawn_importer(int child_sock)
{
  return test::spawn_self("gpu_pool_ipc.importer_role", socket_env, std::to_string(child_sock));
}

/// The exporter's side with the pool on `device`; the importer reads it from device 0.
void export_to_a_child(int device)
{
  ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
  auto pool = device_pool(device, allocation_handle_type::posix_file_descriptor);
  stream s;
  exported_allocation alloc{pool, ipc_bytes, s};
  fill(alloc.get(), ipc_bytes, ipc_seed, s.s);
  auto ready = ipc_event::create();
  ready.record(s);
  auto handle = pool.export_handle();
  export_message m{alloc.export_data(), ready.handle(), ipc_bytes, ipc_seed, device};

  int sv[2]{};
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  owned_fd parent_sock{sv[0]}, child_sock{sv[1]};
  ::fcntl(parent_sock.get(), F_SETFD, FD_CLOEXEC);
  pid_t const pid = spawn_importer(child_sock.get());
  ASSERT_GT(pid, 0);
  child_sock.reset();
  send_with_fd(parent_sock.get(), bytes_of(m), handle.fd());

  import_reply reply{};
  (void)receive_with_fd(parent_sock.get(), bytes_of(reply));
  EXPECT_EQ(reply.status, 0) << reply.error;
  EXPECT_EQ(reply.mismatches, 0U) << "the importer read the exporter's pattern";
  EXPECT_EQ(reply.bad_data_rejected, 1) << "bad pointer export data was accepted";
  if (reply.status == 0) {
    auto freed = ipc_event::open(reply.freed);
    freed.make_wait(s);  // the exporter may still use its memory after the importer freed...
    EXPECT_EQ(mismatches(alloc.get(), ipc_bytes, ipc_seed, s.s), 0U);
    alloc.free_after(freed, s);  // ...and frees last
    CUDA_OK(cudaStreamSynchronize(s.s));
    EXPECT_EQ(pool.get<pool_attr::used_mem_current>(), 0U);
  }
  std::uint32_t done{1};
  send_with_fd(parent_sock.get(), bytes_of(done));
  int status{};
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "importer status " << status;
  std::cout << "importer: mismatches " << reply.mismatches << ", imported pool used bytes "
            << (reply.imported_used_bytes == UINT64_MAX ? std::string{"refused by the driver"}
                                                        : std::to_string(reply.imported_used_bytes))
            << "\n";
  (void)cudaSetDevice(0);
}

TEST(gpu_pool_ipc, two_processes)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  export_to_a_child(0);
}

TEST(gpu_pool_ipc, two_processes_pool_on_device_1_read_from_device_0)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  int const n = get_num_cuda_devices();
  if (n < 2) { GTEST_SKIP() << "needs 2 GPUs; this machine has " << n; }
  int can{};
  CUDA_OK(cudaDeviceCanAccessPeer(&can, 0, 1));
  if (can == 0) { GTEST_SKIP() << "device 0 has no peer capability with device 1"; }
  export_to_a_child(1);  // the importer finds home 1, gives device 0 access and reads there
}

// -- two GPUs --------------------------------------------------------------------------------

TEST(gpu_pool_multi, device_1_reads_a_pool_of_device_0)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  int const n = get_num_cuda_devices();
  if (n < 2) { GTEST_SKIP() << "needs 2 GPUs; this machine has " << n; }
  int can{};
  CUDA_OK(cudaDeviceCanAccessPeer(&can, 1, 0));
  if (can == 0) { GTEST_SKIP() << "device 1 has no peer capability with device 0"; }
  CUDA_OK(cudaSetDevice(0));
  auto pool = device_pool(0);
  EXPECT_EQ(pool.access(cuda_device_id{1}), access_flags::none);
  pool.set_access(cuda_device_id{1}, access_flags::read_write);
  EXPECT_EQ(pool.access(cuda_device_id{1}), access_flags::read_write);
  stream s0;
  void* p = pool.allocate(8 * mib, s0);
  fill(p, 8 * mib, 11, s0.s);
  CUDA_OK(cudaStreamSynchronize(s0.s));
  CUDA_OK(cudaSetDevice(1));
  unsigned long long bad{};
  {
    stream s1;  // on device 1
    bad = mismatches(p, 8 * mib, 11, s1.s);
  }
  CUDA_OK(cudaSetDevice(0));
  EXPECT_EQ(bad, 0U) << "a kernel on device 1 read device 0's pool memory";
  pool.deallocate(p, s0);
  CUDA_OK(cudaStreamSynchronize(s0.s));
}

TEST(gpu_pool_multi, device_without_peer_capability_is_refused)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  int const n = get_num_cuda_devices();
  if (n < 2) { GTEST_SKIP() << "needs 2 GPUs; this machine has " << n; }
  for (int owner = 0; owner < n; ++owner) {
    for (int accessor = 0; accessor < n; ++accessor) {
      int can{1};
      CUDA_OK(cudaDeviceCanAccessPeer(&can, accessor, owner));
      if (owner == accessor || can != 0) { continue; }
      auto pool = device_pool(owner);
      try {
        pool.set_access(cuda_device_id{accessor});
        FAIL() << "access granted without peer capability";
      } catch (cuda_error const& e) {
        EXPECT_EQ(e.status(), cudaErrorPeerAccessUnsupported);
        EXPECT_HAS(e.what(), "no peer capability");
      }
      return;
    }
  }
  GTEST_SKIP() << "every device pair here has peer capability; the refusal is covered by "
                  "PoolAccess.RefusalsSayWhy (CPU)";
}

}  // namespace
}  // namespace gpumem
