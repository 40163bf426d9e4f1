// Pool features on a real GPU: which pool and device own a pointer, exporting any allocation of an
// IPC-capable pool, the pool that is current at allocation time, a view recorded on its pool's
// device, out-of-memory messages naming the pool's device, access by location lists, and stream
// capture (the driver's pool captured into a graph; our suballocators refused clearly).
// Skips without a GPU; the two-GPU tests skip with a reason on one GPU.
#include <support/backend.hpp>

#include <gpumem/caching_device_allocator.hpp>
#include <gpumem/cuda_device_id.hpp>

#include <gpumem/detail/stream_capture.hpp>
#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/cuda_async_view_memory_resource.hpp>
#include <gpumem/mr/caching_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/current_pool_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/pool/device_pools.hpp>
#include <gpumem/pool/ipc.hpp>
#include <gpumem/pool/memory_pool.hpp>
#include <gpumem/pool/pointer_query.hpp>
#include <gpumem/pool/pool_capabilities.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

namespace gpumem {
namespace {

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

constexpr std::size_t mib = std::size_t{1} << 20;

struct stream {
  cudaStream_t s{};
  explicit stream(int device = -1)
  {
    int previous{};
    (void)cudaGetDevice(&previous);
    if (device >= 0) { (void)cudaSetDevice(device); }
    (void)cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    (void)cudaSetDevice(previous);
  }
  ~stream() { (void)cudaStreamDestroy(s); }
  operator cuda_stream_view() const { return s; }  // NOLINT
};

__global__ void fill_ones(unsigned* p, std::size_t n)
{
  for (auto i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    p[i] = 1U;
  }
}

memory_pool device_pool(int device = 0, handle_type_set handles = {}, std::size_t max = 0)
{
  return memory_pool{
      {.location = pool_location::device(device), .handle_types = handles, .max_size_bytes = max}};
}

// -- which pool and device own a pointer ------------------------------------------------------

TEST(gpu_pointer_query, pool_device_and_range_of_each_kind_of_memory)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto pool = device_pool();
  stream s;
  void* p         = pool.allocate(3 * mib, s);
  auto const info = query_pointer(static_cast<char*>(p) + 100);
  EXPECT_EQ(info.type, cudaMemoryTypeDevice);
  EXPECT_EQ(info.device, 0);
  EXPECT_EQ(info.pool, pool.handle());
  EXPECT_EQ(info.base, p);
  EXPECT_GE(info.size, 3 * mib);
  EXPECT_TRUE(pool.owns(p));
  auto other = device_pool();
  EXPECT_FALSE(other.owns(p));
  EXPECT_FALSE(default_pool(cuda_device_id{0}).owns(p));

  void* plain{};
  CUDA_OK(cudaMalloc(&plain, mib));
  auto const pi = query_pointer(plain);
  EXPECT_EQ(pi.type, cudaMemoryTypeDevice);
  EXPECT_EQ(pi.device, 0);
  EXPECT_FALSE(pi.from_pool()) << "cudaMalloc memory is not from a stream-ordered pool";
  EXPECT_FALSE(pool.owns(plain));

  void* pinned{};
  CUDA_OK(cudaMallocHost(&pinned, 4096));
  EXPECT_EQ(query_pointer(pinned).type, cudaMemoryTypeHost);
  std::vector<char> heap(4096);
  EXPECT_EQ(query_pointer(heap.data()).type, cudaMemoryTypeUnregistered);
  EXPECT_FALSE(pool.owns(heap.data()));
  EXPECT_FALSE(pool.owns(nullptr));

  CUDA_OK(cudaFreeHost(pinned));
  CUDA_OK(cudaFree(plain));
  pool.deallocate(p, s);
  CUDA_OK(cudaStreamSynchronize(s.s));
}

// -- exporting any allocation of an IPC-capable pool -------------------------------------------

TEST(gpu_export_pointer, any_allocation_of_a_shared_ipc_pool)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto const caps = query_pool_capabilities(cuda_device_id{0});
  if (!caps.supported_handle_types.contains(allocation_handle_type::posix_file_descriptor)) {
    GTEST_SKIP() << "this device cannot export pools as file descriptors";
  }
  stream s;
  auto ipc  = device_pool(0, allocation_handle_type::posix_file_descriptor);
  auto fd   = ipc.export_handle();
  void* p   = ipc.allocate(mib, s);  // a plain memory_pool_ref allocation, not exported_allocation
  auto data = export_pointer(p);
  bool any  = false;
  for (auto b : data.bytes) { any = any || b != std::byte{0}; }
  EXPECT_TRUE(any) << "the export data is all zeros";
  ipc.deallocate(p, s);

  mr::cuda_async_memory_resource async{64 * mib, 0, allocation_handle_type::posix_file_descriptor};
  auto afd = async.pool().export_handle();
  void* q  = async.allocate(mib, s);
  EXPECT_NO_THROW((void)export_pointer(q));
  async.deallocate(q, mib, s);

  auto plain_pool = device_pool();
  void* r         = plain_pool.allocate(mib, s);
  try {
    (void)export_pointer(r);
    ADD_FAILURE() << "a pool without handle types exported an allocation";
  } catch (cuda_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("IPC handle type"), std::string::npos) << e.what();
  }
  plain_pool.deallocate(r, s);

  void* m{};
  CUDA_OK(cudaMalloc(&m, mib));
  EXPECT_THROW((void)export_pointer(m), logic_error);
  EXPECT_THROW((void)export_pointer(nullptr), logic_error);
  CUDA_OK(cudaFree(m));
  CUDA_OK(cudaStreamSynchronize(s.s));
}

// -- the pool current at allocation time --------------------------------------------------------

TEST(gpu_current_pool, each_allocation_uses_the_pool_current_then)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  stream s;
  mr::current_pool_memory_resource mr;
  auto mine = device_pool();
  void* a   = mr.allocate(mib, s);
  EXPECT_TRUE(default_pool(cuda_device_id{0}).owns(a)) << "the default pool is current at first";
  void* b{};
  {
    scoped_current_pool guard{cuda_device_id{0}, mine};
    b = mr.allocate(mib, s);
    EXPECT_TRUE(mine.owns(b)) << "allocations follow the current pool";
  }
  void* c = mr.allocate(mib, s);
  EXPECT_TRUE(default_pool(cuda_device_id{0}).owns(c)) << "and follow it back";
  mr.deallocate(c, mib, s);
  mr.deallocate(b, mib, s);  // freed to the pool it came from, whatever is current now
  mr.deallocate(a, mib, s);
  CUDA_OK(cudaStreamSynchronize(s.s));
  EXPECT_EQ(mine.get<pool_attr::used_mem_current>(), 0U);
  EXPECT_TRUE(mr == mr::current_pool_memory_resource{});
}

TEST(gpu_current_pool, the_stream_device_decides_not_the_current_device)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  if (get_num_cuda_devices() < 2) {
    GTEST_SKIP() << "needs 2 GPUs; this machine has " << get_num_cuda_devices();
  }
  stream on1{1};
  mr::current_pool_memory_resource mr;
  CUDA_OK(cudaSetDevice(0));
  void* p = mr.allocate(mib, on1);
  EXPECT_EQ(query_pointer(p).device, 1);
  EXPECT_TRUE(default_pool(cuda_device_id{1}).owns(p));
  mr.deallocate(p, mib, on1);
  CUDA_OK(cudaStreamSynchronize(on1.s));
}

TEST(gpu_pool_view, a_raw_handle_is_recorded_on_its_pools_device)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto pool = device_pool();
  mr::cuda_async_view_memory_resource view{pool.handle()};
  EXPECT_EQ(view.pool().location(), pool_location::device(0));
  if (get_num_cuda_devices() < 2) { GTEST_SKIP() << "needs 2 GPUs for the other-device case"; }
  auto on1 = device_pool(1);
  CUDA_OK(cudaSetDevice(0));
  mr::cuda_async_view_memory_resource view1{on1.handle()};
  EXPECT_EQ(view1.pool().location(), pool_location::device(1)) << "not the current device (0)";
  mr::cuda_async_view_memory_resource def1{default_pool(cuda_device_id{1}).handle()};
  EXPECT_EQ(def1.pool().location(), pool_location::device(1));
}

TEST(gpu_pool_oom, the_message_names_the_pools_device_and_the_pool_stays_usable)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto pool = device_pool(0, {}, 64 * mib);
  stream s;
  void* p = pool.allocate(48 * mib, s);
  try {
    (void)pool.allocate(32 * mib, s);
    ADD_FAILURE() << "a 64 MiB pool gave 80 MiB";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find("on device 0"), std::string::npos) << what;
    EXPECT_NE(what.find("device 0 has"), std::string::npos) << what;
    std::cout << "max_size cap pushed past: " << what << "\n";
  }
  void* q = pool.allocate(16 * mib, s);  // still usable within the cap
  pool.deallocate(q, s);
  pool.deallocate(p, s);
  CUDA_OK(cudaStreamSynchronize(s.s));
}

// -- access by location ---------------------------------------------------------------------

TEST(gpu_pool_access, a_list_of_locations_in_one_call)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto pool = device_pool();
  std::vector<access_descriptor> const own{{pool_location::device(0), access_flags::read_write}};
  EXPECT_NO_THROW(pool.set_access(own));  // the owner: nothing to change
  EXPECT_EQ(pool.access(pool_location::device(0)), access_flags::read_write);
  std::vector<access_descriptor> const bad{{pool_location::device(0), access_flags::read_write},
                                           {pool_location::device(64), access_flags::read}};
  EXPECT_THROW(pool.set_access(bad), logic_error) << "device 64 does not exist";
  // The host as an accessor of device memory: CUDA decides; whatever it says must be clear.
  try {
    pool.set_access(pool_location::host(), access_flags::read_write);
    std::cout << "host access to a device pool: accepted, now "
              << to_string(pool.access(pool_location::host())) << "\n";
  } catch (cuda_error const& e) {
    std::cout << "host access to a device pool: refused: " << e.what() << "\n";
    EXPECT_NE(std::string{e.what()}.find("host: read_write"), std::string::npos) << e.what();
  }
  if (get_num_cuda_devices() >= 2) {
    int can{};
    CUDA_OK(cudaDeviceCanAccessPeer(&can, 1, 0));
    if (can != 0) {
      std::vector<access_descriptor> const both{
          {pool_location::device(1), access_flags::read_write},
          {pool_location::device(0), access_flags::read_write}};
      pool.set_access(both);
      EXPECT_EQ(pool.access(cuda_device_id{1}), access_flags::read_write);
    }
  }
}

TEST(gpu_pool_access, host_pool_access_by_location_when_supported)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto const c = query_pool_capabilities(cuda_device_id{0});
  if (!c.host_pools_supported) { GTEST_SKIP() << "host pools unsupported on this device/driver"; }
  memory_pool host{{.location = pool_location::host()}};
  std::vector<access_descriptor> const d{{pool_location::device(0), access_flags::read_write}};
  host.set_access(d);
  EXPECT_EQ(host.access(cuda_device_id{0}), access_flags::read_write);
  stream s;
  void* p = host.allocate(mib, s);
  EXPECT_EQ(query_pointer(p).pool, host.handle());
  fill_ones<<<64, 256, 0, s.s>>>(static_cast<unsigned*>(p), mib / 4);
  CUDA_OK(cudaStreamSynchronize(s.s));
  EXPECT_EQ(static_cast<unsigned*>(p)[1000], 1U) << "host pool memory is host-readable";
  host.deallocate(p, s);
  CUDA_OK(cudaStreamSynchronize(s.s));
}

// -- stream capture -------------------------------------------------------------------------

TEST(gpu_capture, the_driver_pool_allocates_and_frees_inside_a_graph)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  mr::cuda_async_memory_resource mr{64 * mib, 0};
  stream s;
  unsigned* out{};
  CUDA_OK(cudaMalloc(&out, sizeof(unsigned)));
  CUDA_OK(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeGlobal));
  void* p = mr.allocate(mib, s);
  fill_ones<<<64, 256, 0, s.s>>>(static_cast<unsigned*>(p), mib / 4);
  cudaMemcpyAsync(out, static_cast<unsigned*>(p) + 12345, sizeof(unsigned),
                  cudaMemcpyDeviceToDevice, s.s);
  mr.deallocate(p, mib, s);
  cudaGraph_t graph{};
  CUDA_OK(cudaStreamEndCapture(s.s, &graph));
  cudaGraphExec_t exec{};
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) { CUDA_OK(cudaGraphLaunch(exec, s.s)); }
  unsigned host{};
  CUDA_OK(cudaMemcpyAsync(&host, out, sizeof host, cudaMemcpyDeviceToHost, s.s));
  CUDA_OK(cudaStreamSynchronize(s.s));
  EXPECT_EQ(host, 1U);
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  CUDA_OK(cudaFree(out));
}

TEST(gpu_capture, a_suballocator_that_must_grow_during_a_global_capture_is_refused_clearly)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  mr::cuda_memory_resource cuda;
  mr::pool_memory_resource<mr::cuda_memory_resource> pool{&cuda, 8 * mib};
  stream a, b;
  void* small = pool.allocate(mib, a);
  CUDA_OK(cudaStreamBeginCapture(b.s, cudaStreamCaptureModeGlobal));
  try {
    (void)pool.allocate(64 * mib, a);  // needs cudaMalloc, which the capture forbids
    ADD_FAILURE() << "the pool grew during a global capture";
  } catch (cuda_error const& e) {
    EXPECT_TRUE(detail::is_stream_capture_error(e.status())) << e.what();
    EXPECT_NE(std::string{e.what()}.find("captured into a CUDA graph"), std::string::npos);
    std::cout << "refusal: " << e.what() << "\n";
  }
  cudaGraph_t graph{};
  auto const end = cudaStreamEndCapture(b.s, &graph);
  std::cout << "end of the broken capture: " << cudaGetErrorName(end) << "\n";
  (void)cudaGetLastError();
  if (graph != nullptr) { (void)cudaGraphDestroy(graph); }
  void* big = pool.allocate(64 * mib, a);  // usable again once the capture is over
  pool.deallocate(big, 64 * mib, a);
  pool.deallocate(small, mib, a);
  CUDA_OK(cudaStreamSynchronize(a.s));
}

// -- the driver's pool reuses on the same stream ------------------------------------------------

TEST(gpu_pool_reuse_same_stream, a_block_freed_on_a_stream_is_reused_by_the_next_allocation_there)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto pool = device_pool();
  pool.set<pool_attr::release_threshold>(UINT64_MAX);
  // None of the cross-stream policies is needed for reuse on the stream that freed.
  pool.set<pool_attr::reuse_follow_event_dependencies>(false);
  pool.set<pool_attr::reuse_allow_opportunistic>(false);
  pool.set<pool_attr::reuse_allow_internal_dependencies>(false);
  stream s;
  void* p = pool.allocate(4 * mib, s);
  fill_ones<<<64, 256, 0, s.s>>>(static_cast<unsigned*>(p), 4 * mib / 4);  // still running...
  pool.deallocate(p, s);
  auto const reserved = pool.get<pool_attr::reserved_mem_current>();
  void* q             = pool.allocate(4 * mib, s);  // ...when the same stream asks again
  EXPECT_EQ(q, p) << "the driver did not reuse the block on the stream that freed it";
  EXPECT_EQ(pool.get<pool_attr::reserved_mem_current>(), reserved) << "the pool grew instead";
  pool.deallocate(q, s);
  CUDA_OK(cudaStreamSynchronize(s.s));
}

// -- host pools: the CPU's access, and views refused ----------------------------------------------

TEST(gpu_pool_host_cpu_access, host_and_host_numa_pools_are_read_write_for_the_cpu)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto const c = query_pool_capabilities(cuda_device_id{0});
  if (!c.host_pools_supported) { GTEST_SKIP() << "host pools unsupported on this device/driver"; }
  memory_pool host{{.location = pool_location::host()}};
  EXPECT_EQ(host.access(pool_location::host()), access_flags::read_write)
      << "CUDA: host pools are accessible from the CPU by default";
  stream s;
  auto* p = static_cast<unsigned char*>(host.allocate(mib, s));
  CUDA_OK(cudaStreamSynchronize(s.s));
  std::memset(p, 0x5a, mib);  // no grant needed
  EXPECT_EQ(p[mib - 1], 0x5a);
  host.deallocate(p, s);
  CUDA_OK(cudaStreamSynchronize(s.s));
  int node{-1};
  if (c.host_numa_pools_supported &&
      cudaDeviceGetAttribute(&node, cudaDevAttrHostNumaId, 0) == cudaSuccess && node >= 0) {
    memory_pool numa{{.location = pool_location::host_numa(node)}};
    EXPECT_EQ(numa.access(pool_location::host_numa(node)), access_flags::read_write);
    std::cout << "host NUMA pool on node " << node << ": the host answers "
              << to_string(numa.access(pool_location::host())) << "\n";
  } else {
    std::cout << "host NUMA pools: not checked (unsupported or no node for device 0)\n";
  }
}

TEST(gpu_pool_view, a_view_over_a_host_pool_is_refused_saying_it_is_a_host_pool)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  auto const c = query_pool_capabilities(cuda_device_id{0});
  if (!c.host_pools_supported) { GTEST_SKIP() << "host pools unsupported on this device/driver"; }
  memory_pool host{{.location = pool_location::host()}};
  host.set_access(pool_location::device(0), access_flags::read_write);
  try {
    mr::cuda_async_view_memory_resource view{host.handle()};
    ADD_FAILURE() << "a view over a host pool was built";
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("pinned host memory"), std::string::npos) << e.what();
  }
  auto pool = device_pool();
  EXPECT_NO_THROW((mr::cuda_async_view_memory_resource{pool.handle()}))
      << "a device pool must still be viewable (the host-access query must not refuse it)";
}

// -- the caching allocators under stream capture --------------------------------------------------

TEST(gpu_capture, a_caching_allocator_that_must_allocate_during_a_global_capture_is_refused_clearly)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  mr::cuda_memory_resource cuda;
  mr::caching_memory_resource caching{&cuda};
  stream a, b;
  void* cached = caching.allocate(4096, a);
  caching.deallocate(cached, 4096, a);
  CUDA_OK(cudaStreamBeginCapture(b.s, cudaStreamCaptureModeGlobal));
  void* again = caching.allocate(4096, a);  // same stream: reused without a CUDA call
  try {
    (void)caching.allocate(256 * 1024, a);  // a new block needs cudaMalloc
    ADD_FAILURE() << "the caching resource allocated during a global capture";
  } catch (cuda_error const& e) {
    EXPECT_TRUE(detail::is_stream_capture_error(e.status())) << e.what();
    EXPECT_NE(std::string{e.what()}.find("captured into a CUDA graph"), std::string::npos)
        << e.what();
  }
  caching_device_allocator cub_style;
  void* d{};
  auto const st = cub_style.DeviceAllocate(&d, 4096, a.s);
  EXPECT_TRUE(detail::is_stream_capture_error(st)) << cudaGetErrorName(st);
  cudaGraph_t graph{};
  (void)cudaStreamEndCapture(b.s, &graph);
  (void)cudaGetLastError();
  if (graph != nullptr) { (void)cudaGraphDestroy(graph); }
  EXPECT_EQ(again, cached);
  void* big = caching.allocate(256 * 1024, a);  // usable again after the capture
  caching.deallocate(big, 256 * 1024, a);
  caching.deallocate(again, 4096, a);
  ASSERT_EQ(cub_style.DeviceAllocate(&d, 4096, a.s), cudaSuccess);
  EXPECT_EQ(cub_style.DeviceFree(d), cudaSuccess);
  CUDA_OK(cudaStreamSynchronize(a.s));
}

}  // namespace
}  // namespace gpumem
