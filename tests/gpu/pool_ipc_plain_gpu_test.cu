// Sharing plain pool allocations with a second process, and importers that see the devices
// differently. This executable re-runs itself as the importer (gpu_ipc_child.importer_role).
//  * one GPU: an allocation from memory_pool_ref::allocate, from a cuda_async_memory_resource
//    created with an IPC handle type, and from cudaMallocAsync on an IPC pool made current, each
//    imported, read and written by the child; the exporter frees after the child, with a stream
//    wait, after an event synchronization, and with cudaFree.
//  * two GPUs: the exporter's access grants are not inherited by the importer; an importer whose
//    CUDA_VISIBLE_DEVICES swaps the two devices (the exporter's pool.location() names the wrong
//    device there) and one that cannot see the pool's device at all.
// Skips without a GPU; the two-GPU tests skip with a reason on one GPU.
#include <support/backend.hpp>
#include <support/child_process.hpp>

#include <gpumem/cuda_device_id.hpp>
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

#include <csignal>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace gpumem {
namespace {

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

constexpr std::size_t mib          = std::size_t{1} << 20;
constexpr std::size_t shared_bytes = 8 * mib;
constexpr char const* socket_env   = "GPUMEM_IPC_PLAIN_SOCKET";
constexpr char const* mode_env     = "GPUMEM_IPC_PLAIN_MODE";

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

/// A non-blocking stream on `device` (the current one when negative), destroyed at scope end.
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
  stream(stream const&)            = delete;
  stream& operator=(stream const&) = delete;
  operator cuda_stream_view() const { return s; }  // NOLINT
};

void fill(void* p, std::size_t bytes, std::uint32_t seed, cudaStream_t s)
{
  write_pattern<<<128, 256, 0, s>>>(static_cast<std::uint32_t*>(p), bytes / 4, seed);
}

/// Mismatches of the pattern at p, counted by a kernel on `s` (the current device must be the
/// stream's); ~0 when the count itself failed.
unsigned long long mismatches(void const* p, std::size_t bytes, std::uint32_t seed, cudaStream_t s)
{
  unsigned long long* d{};
  unsigned long long h{~0ULL};
  if (cudaMallocAsync(reinterpret_cast<void**>(&d), sizeof *d, s) != cudaSuccess) { return h; }
  (void)cudaMemsetAsync(d, 0, sizeof *d, s);
  count_mismatches<<<128, 256, 0, s>>>(static_cast<std::uint32_t const*>(p), bytes / 4, seed, d);
  (void)cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, s);
  (void)cudaFreeAsync(d, s);
  if (cudaStreamSynchronize(s) != cudaSuccess) { return ~0ULL; }
  return h;
}

std::string pci_bus_id(int device)
{
  char id[32]{};
  if (cudaDeviceGetPCIBusId(id, sizeof id, device) != cudaSuccess) { return "?"; }
  return id;
}

// -- the messages ---------------------------------------------------------------------------------

struct request {
  pointer_export_data data;
  ipc_event_handle ready;
  std::uint64_t bytes{};
  std::uint32_t seed_in{};       ///< the exporter's pattern, for the child to check
  std::uint32_t seed_out{};      ///< the child's pattern, for the exporter to check
  std::int32_t exporter_home{};  ///< the exporter's pool.location().id (its own numbering)
  char home_pci[32]{};           ///< the PCI bus id of the pool's device
};

struct reply {
  ipc_event_handle freed;
  unsigned long long mismatches{~0ULL};
  std::int32_t status{};  ///< 0 ok; 1 failed; 2 CUDA refused a step (error says which)
  std::int32_t access_before{-1};
  std::int32_t access_after{-1};
  std::int32_t home_known{-1};
  std::int32_t home_id{-1};
  std::int32_t exporter_home_refused{};
  std::int32_t devices{};
  std::int32_t other_device_wait_refused{};  ///< make_wait from another device's stream refused
  char error[512]{};
};

using test::bytes_of;

// -- the child ------------------------------------------------------------------------------------

/// Where the importer is, on stderr: when it dies (a signal, a CUDA abort) the exporter's log
/// shows the last step it reached.
void step(std::string const& mode, char const* what)
{
  std::cerr << "importer (" << mode << "): " << what << std::endl;
}

/// Sends the reply, then waits for the exporter's "done": what the caller keeps alive until then
/// (the imported pool, the freed event) outlives the exporter's wait.
void reply_and_wait(int sock, reply const& r)
{
  send_with_fd(sock, bytes_of(r));
  std::uint32_t done{};
  (void)receive_with_fd(sock, bytes_of(done));
}

/// Imports what the exporter sends, as `mode` says, reads the exporter's pattern, writes its own
/// and frees first (free_async + the freed event), replies and waits for the exporter. `replied`
/// tells the caller whether the reply went out.
void import_in_child(int sock, std::string const& mode, reply& r, bool& replied)
{
  request m{};
  shareable_pool_handle handle{receive_with_fd(sock, bytes_of(m))};
  step(mode, "received the pool handle");
  r.devices = get_num_cuda_devices();
  std::optional<imported_memory_pool> pool;
  int read_on = 0;  // the device (this process's numbering) whose kernels read and write
  if (mode == "remap") {
    // Our device 0 is the exporter's device 1: check that CUDA_VISIBLE_DEVICES did swap them.
    if (pci_bus_id(0) != m.home_pci) {
      throw std::runtime_error{"CUDA_VISIBLE_DEVICES did not make the pool's device (" +
                               std::string{m.home_pci} + ") device 0 here (it is " + pci_bus_id(0) +
                               ")"};
    }
    try {  // the documented mistake: the exporter's location, in the exporter's numbering
      imported_memory_pool wrong{handle, pool_location::device(m.exporter_home)};
    } catch (logic_error const& e) {
      r.exporter_home_refused = 1;
      std::cout << "child: the exporter's location was refused: " << e.what() << "\n";
    }
    pool.emplace(handle);
    read_on = 1;
    pool->set_access(cuda_device_id{read_on});
  } else if (mode == "invisible") {
    try {
      pool.emplace(handle);
    } catch (cuda_error const& e) {
      r.status = 2;
      std::snprintf(r.error, sizeof r.error, "import: %s", e.what());
      return;
    }
    try {
      pool->set_access(cuda_device_id{0});  // the home is unknown: CUDA decides
    } catch (cuda_error const& e) {
      r.status = 2;
      std::snprintf(r.error, sizeof r.error, "set_access: %s", e.what());
      return;
    }
  } else if (mode == "inherit") {
    pool.emplace(handle);
    r.access_before = static_cast<std::int32_t>(pool->access(cuda_device_id{1}));
    pool->set_access(cuda_device_id{1});
    r.access_after = static_cast<std::int32_t>(pool->access(cuda_device_id{1}));
    read_on        = 1;
  } else {
    pool.emplace(handle);
  }
  step(mode, "imported the pool");
  r.home_known      = pool->location().has_value() ? 1 : 0;
  r.home_id         = pool->location() ? pool->location()->id : -1;
  int const free_on = pool->location() ? pool->location()->id : 0;

  auto alloc = pool->import_pointer(m.data, m.bytes);
  step(mode, "imported the pointer");
  {
    // The event is opened with the reading device current, the device of the stream that waits
    // on it.
    (void)cudaSetDevice(read_on);
    auto ready = ipc_event::open(m.ready);
    step(mode, "opened the exporter's event");
    if (mode == "inherit") {  // a stream of the other device cannot wait on it: refused, no crash
      stream other{0};
      try {
        ready.make_wait(other);
      } catch (logic_error const& e) {
        r.other_device_wait_refused = 1;
        std::cout << "child: a wait from device 0 was refused: " << e.what() << "\n";
      }
    }
    stream s;
    step(mode, "made a stream on the reading device");
    ready.make_wait(s);  // the exporter's pattern is written before we read
    step(mode, "the stream waits for the exporter's event");
    r.mismatches = mismatches(alloc.get(), m.bytes, m.seed_in, s.s);
    step(mode, "read the exporter's pattern");
    fill(alloc.get(), m.bytes, m.seed_out, s.s);
    if (cudaStreamSynchronize(s.s) != cudaSuccess) {
      throw std::runtime_error{"the child's kernels on the imported memory failed"};
    }
  }
  (void)cudaSetDevice(free_on);
  stream fs;
  auto freed = ipc_event::create();
  alloc.free_async(fs, freed);  // the importer frees first and signals
  step(mode, "wrote its pattern and freed");
  r.freed = freed.handle();
  replied = true;
  reply_and_wait(sock, r);  // `pool` and `freed` live until the exporter has waited
}

TEST(gpu_ipc_child, importer_role)
{
  char const* sock_text = std::getenv(socket_env);
  char const* mode      = std::getenv(mode_env);
  if (sock_text == nullptr || mode == nullptr) {
    GTEST_SKIP() << "runs only as the child of the gpu_ipc_* tests";
  }
  int const sock = std::atoi(sock_text);
  reply r{};
  bool replied = false;
  try {
    import_in_child(sock, mode, r, replied);
  } catch (cuda_error const& e) {
    // Without the home device, what CUDA refuses is CUDA's answer to report, not our failure.
    r.status = std::string{mode} == "invisible" ? 2 : 1;
    std::snprintf(r.error, sizeof r.error, "%s", e.what());
  } catch (std::exception const& e) {
    r.status = 1;
    std::snprintf(r.error, sizeof r.error, "%s", e.what());
  }
  if (!replied) { reply_and_wait(sock, r); }
  EXPECT_NE(r.status, 1) << r.error;
}

// -- the exporter ---------------------------------------------------------------------------------

/// A child importer and the socket to it.
class child {
 public:
  child(std::string const& mode, std::vector<std::pair<std::string, std::string>> env = {})
  {
    int sv[2]{};
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) { return; }
    parent_ = owned_fd{sv[0]};
    owned_fd child_sock{sv[1]};
    ::fcntl(parent_.get(), F_SETFD, FD_CLOEXEC);
    env.emplace_back(socket_env, std::to_string(child_sock.get()));
    env.emplace_back(mode_env, mode);
    pid_ = test::spawn_self("gpu_ipc_child.importer_role", env);
  }
  [[nodiscard]] bool started() const { return pid_ > 0; }
  /// The child's reply; nothing when it closed the socket first (it died: see `finish`).
  std::optional<reply> exchange(request const& m, int pool_fd)
  {
    send_with_fd(parent_.get(), bytes_of(m), pool_fd);
    reply r{};
    try {
      (void)receive_with_fd(parent_.get(), bytes_of(r));
    } catch (std::exception const& e) {
      std::cerr << "exporter: no reply from the importer: " << e.what() << "\n";
      return std::nullopt;
    }
    return r;
  }
  /// Lets the child exit; its exit status (0: passed; 128 + N: killed by signal N).
  int finish()
  {
    std::uint32_t done{1};
    try {
      send_with_fd(parent_.get(), bytes_of(done));
    } catch (std::exception const&) {  // NOLINT(bugprone-empty-catch): the child is gone already
    }
    int status{};
    if (::waitpid(pid_, &status, 0) != pid_) { return -1; }
    if (WIFSIGNALED(status)) { return 128 + WTERMSIG(status); }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 255;
  }

 private:
  owned_fd parent_;
  pid_t pid_{-1};
};

bool posix_fd_pools(int device)
{
  return query_pool_capabilities(cuda_device_id{device})
      .supported_handle_types.contains(allocation_handle_type::posix_file_descriptor);
}

/// Shares `p` (bytes of a pool exported as `handle`, whose device is `home`) with a child run in
/// `mode`; checks that the child read the exporter's pattern and that the exporter reads the
/// child's; then `free_after(freed_event)` frees it the way the test wants. Returns the reply.
reply share_with_child(shareable_pool_handle const& handle, void* p, int home, stream const& s,
                       std::string const& mode, std::function<void(ipc_event const&)> free_after,
                       std::vector<std::pair<std::string, std::string>> env = {})
{
  std::uint32_t const seed_in  = 0xC0FFEEU ^ static_cast<std::uint32_t>(mode.size());
  std::uint32_t const seed_out = 0xBEEF00U ^ static_cast<std::uint32_t>(mode.size());
  fill(p, shared_bytes, seed_in, s.s);
  auto ready = ipc_event::create();
  ready.record(s);
  request m{export_pointer(p), ready.handle(), shared_bytes, seed_in, seed_out, home, {}};
  std::snprintf(m.home_pci, sizeof m.home_pci, "%s", pci_bus_id(home).c_str());

  child c{mode, std::move(env)};
  if (!c.started()) {
    ADD_FAILURE() << "could not start the importer";
    return {};
  }
  auto const got = c.exchange(m, handle.fd());
  if (!got) {
    int const status = c.finish();
    ADD_FAILURE() << "the importer (" << mode << ") died before replying: exit status " << status
                  << (status > 128 ? std::string{" ("} + strsignal(status - 128) + ")" : "")
                  << "; its last step is in the log above";
    free_after(ipc_event::create());
    return {};
  }
  auto const& r = *got;
  EXPECT_NE(r.status, 1) << "importer (" << mode << "): " << r.error;
  if (r.status == 0) {
    EXPECT_EQ(r.mismatches, 0U) << "the importer read the exporter's pattern (" << mode << ")";
    auto freed = ipc_event::open(r.freed);
    freed.make_wait(s);  // the child's writes and free come first
    EXPECT_EQ(mismatches(p, shared_bytes, seed_out, s.s), 0U)
        << "the exporter reads what the importer wrote (" << mode << ")";
    free_after(freed);  // the exporter frees last
  } else {
    free_after(ipc_event::create());  // nothing was imported: free now
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(c.finish(), 0) << "the importer's own checks (" << mode << ")";
  return r;
}

// -- one GPU: plain allocations of three kinds
// ------------------------------------------------------

TEST(gpu_ipc_plain, memory_pool_ref_allocation_is_read_and_written_by_a_child)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  if (!posix_fd_pools(0)) { GTEST_SKIP() << "device 0 cannot export pools as descriptors"; }
  stream s;
  memory_pool pool{{.location     = pool_location::device(0),
                    .handle_types = allocation_handle_type::posix_file_descriptor}};
  auto handle                = pool.export_handle();
  memory_pool_ref const& ref = pool;
  void* p                    = ref.allocate(shared_bytes, s);
  (void)share_with_child(handle, p, 0, s, "plain", [&](ipc_event const& freed) {
    freed.make_wait(s);  // stream-ordered after the importer's free
    ref.deallocate(p, s);
  });
  CUDA_OK(cudaStreamSynchronize(s.s));
  EXPECT_EQ(pool.get<pool_attr::used_mem_current>(), 0U);
}

TEST(gpu_ipc_plain, cuda_async_resource_allocation_is_read_and_written_by_a_child)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  if (!posix_fd_pools(0)) { GTEST_SKIP() << "device 0 cannot export pools as descriptors"; }
  stream s;
  mr::cuda_async_memory_resource mr{64 * mib, 0, allocation_handle_type::posix_file_descriptor};
  auto handle = mr.pool().export_handle();
  void* p     = mr.allocate(shared_bytes, s);
  (void)share_with_child(handle, p, 0, s, "plain-async", [&](ipc_event const& freed) {
    freed.synchronize();  // another synchronization: the host waits for the importer's free
    mr.deallocate(p, shared_bytes, s);
  });
  CUDA_OK(cudaStreamSynchronize(s.s));
  EXPECT_EQ(mr.pool().get<pool_attr::used_mem_current>(), 0U);
}

TEST(gpu_ipc_plain, cuda_malloc_async_allocation_is_read_and_written_by_a_child_and_cuda_freed)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  if (!posix_fd_pools(0)) { GTEST_SKIP() << "device 0 cannot export pools as descriptors"; }
  stream s;
  memory_pool pool{{.location     = pool_location::device(0),
                    .handle_types = allocation_handle_type::posix_file_descriptor}};
  auto handle = pool.export_handle();
  void* p{};
  {
    scoped_current_pool current{cuda_device_id{0}, pool};
    CUDA_OK(cudaMallocAsync(&p, shared_bytes, s.s));  // no pool named: the current one
  }
  ASSERT_TRUE(pool.owns(p));
  (void)share_with_child(handle, p, 0, s, "plain-malloc-async", [&](ipc_event const& freed) {
    freed.synchronize();
    EXPECT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
    EXPECT_EQ(cudaFree(p), cudaSuccess);  // cudaFree of pool memory, after the importer freed
  });
  // The block is reusable at once (driver 580 keeps counting it in used_mem_current: pools.md).
  void* q = pool.allocate(shared_bytes, s);
  pool.deallocate(q, s);
  CUDA_OK(cudaStreamSynchronize(s.s));
}

// -- two GPUs ----------------------------------------------------------------------------------

/// Why a two-GPU test cannot run here (empty: it can), with peer capability both ways.
std::string why_not_two_peers()
{
  if (!test::gpu_available()) { return "GPU test skipped: " + test::why_no_gpu(); }
  int const n = get_num_cuda_devices();
  if (n < 2) { return "needs 2 GPUs; this machine has " + std::to_string(n); }
  int a{}, b{};
  (void)cudaDeviceCanAccessPeer(&a, 0, 1);
  (void)cudaDeviceCanAccessPeer(&b, 1, 0);
  if (a == 0 || b == 0) { return "devices 0 and 1 have no peer capability"; }
  if (!posix_fd_pools(0) || !posix_fd_pools(1)) {
    return "the devices cannot export pools as descriptors";
  }
  return {};
}

/// The CUDA_VISIBLE_DEVICES entries that name this process's devices `ids` for a child.
std::string visible_devices(std::vector<int> const& ids)
{
  std::vector<std::string> mine;
  if (char const* env = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::stringstream in{env};
    for (std::string item; std::getline(in, item, ',');) { mine.push_back(item); }
  }
  std::string out;
  for (int id : ids) {
    auto const name = static_cast<std::size_t>(id) < mine.size()
                          ? mine[static_cast<std::size_t>(id)]
                          : std::to_string(id);
    out += (out.empty() ? "" : ",") + name;
  }
  return out;
}

TEST(gpu_ipc_two, the_exporters_access_grants_are_not_inherited_by_the_importer)
{
  if (auto why = why_not_two_peers(); !why.empty()) { GTEST_SKIP() << why; }
  CUDA_OK(cudaSetDevice(0));
  stream s;
  memory_pool pool{{.location     = pool_location::device(0),
                    .handle_types = allocation_handle_type::posix_file_descriptor}};
  pool.set_access(cuda_device_id{1});
  ASSERT_EQ(pool.access(cuda_device_id{1}), access_flags::read_write);
  auto handle  = pool.export_handle();
  void* p      = pool.allocate(shared_bytes, s);
  auto const r = share_with_child(handle, p, 0, s, "inherit", [&](ipc_event const& freed) {
    freed.make_wait(s);
    pool.deallocate(p, s);
  });
  EXPECT_EQ(r.access_before, static_cast<std::int32_t>(access_flags::none))
      << "the importer saw the exporter's grant to device 1";
  EXPECT_EQ(r.other_device_wait_refused, 1)
      << "the event opened on device 1 was waited on by a stream of device 0 without an error";
  EXPECT_EQ(r.access_after, static_cast<std::int32_t>(access_flags::read_write));
  EXPECT_EQ(r.home_known, 1);
  EXPECT_EQ(r.home_id, 0);
}

TEST(gpu_ipc_two, an_importer_with_the_devices_swapped_refuses_the_exporters_numbering)
{
  if (auto why = why_not_two_peers(); !why.empty()) { GTEST_SKIP() << why; }
  CUDA_OK(cudaSetDevice(1));
  stream s;
  memory_pool pool{{.location     = pool_location::device(1),
                    .handle_types = allocation_handle_type::posix_file_descriptor}};
  auto handle  = pool.export_handle();
  void* p      = pool.allocate(shared_bytes, s);
  auto const r = share_with_child(handle, p, 1, s, "remap",
                                  [&](ipc_event const& freed) {
                                    freed.make_wait(s);
                                    pool.deallocate(p, s);
                                  },
                                  {{"CUDA_VISIBLE_DEVICES", visible_devices({1, 0})}});
  EXPECT_EQ(r.exporter_home_refused, 1)
      << "device 1 of the exporter is device 0 of the importer; importing with the exporter's "
         "location must be refused, not trusted";
  EXPECT_EQ(r.home_known, 1);
  EXPECT_EQ(r.home_id, 0) << "the home is found in the importer's own numbering";
  (void)cudaSetDevice(0);
}

TEST(gpu_ipc_two, an_importer_that_cannot_see_the_pools_device_leaves_access_to_cuda)
{
  if (auto why = why_not_two_peers(); !why.empty()) { GTEST_SKIP() << why; }
  CUDA_OK(cudaSetDevice(1));
  stream s;
  memory_pool pool{{.location     = pool_location::device(1),
                    .handle_types = allocation_handle_type::posix_file_descriptor}};
  auto handle  = pool.export_handle();
  void* p      = pool.allocate(shared_bytes, s);
  auto const r = share_with_child(handle, p, 1, s, "invisible",
                                  [&](ipc_event const& freed) {
                                    freed.make_wait(s);
                                    pool.deallocate(p, s);
                                  },
                                  {{"CUDA_VISIBLE_DEVICES", visible_devices({0})}});
  EXPECT_EQ(r.devices, 1);
  if (r.status == 2) {
    // Not gpumem's refusal: CUDA's, reported (a peer mapping needs the home device visible).
    std::cout << "CUDA refused the import or the access without the home device: " << r.error
              << "\n";
  } else if (r.status == 0) {
    EXPECT_EQ(r.home_known, 0) << "no visible device has access: the home is unknown";
    std::cout << "the importer without the home device read and wrote the memory\n";
  }
  (void)cudaSetDevice(0);
}

}  // namespace
}  // namespace gpumem
