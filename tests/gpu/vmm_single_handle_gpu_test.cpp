// Single-handle allocations of vmm_pool_memory_resource on a GPU: one physical handle exported as
// a POSIX file descriptor, imported by this process and by a second one (this executable run again
// as the importer), which read what the exporter wrote and write back; the stream-ordered free.
// Skips without a GPU.
#include <support/backend.hpp>
#include <support/child_process.hpp>

#include <gpumem/mr/vmm_pool_memory_resource.hpp>
#include <gpumem/ipc/fd_passing.hpp>
#include <gpumem/ipc/vmm_ipc.hpp>

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace gpumem {
namespace {

using test::bytes_of;

constexpr std::size_t bytes       = (std::size_t{24} << 20) + 4096;  // not a granule multiple
constexpr char const* socket_env  = "GPUMEM_VMM_IPC_SOCKET";
constexpr std::uint32_t exporters = 0x9e3779b9U;
constexpr std::uint32_t importers = 0x85ebca6bU;

std::vector<std::uint32_t> pattern(std::size_t n, std::uint32_t seed)
{
  std::vector<std::uint32_t> v(n / 4);
  for (std::size_t i = 0; i < v.size(); ++i) { v[i] = static_cast<std::uint32_t>(i) * seed + 1; }
  return v;
}

/// Words of device memory `p` that differ from pattern(n, seed) (n / 4 on a CUDA error).
std::size_t mismatches(void const* p, std::size_t n, std::uint32_t seed)
{
  auto const want = pattern(n, seed);
  std::vector<std::uint32_t> got(want.size());
  if (cudaMemcpy(got.data(), p, n, cudaMemcpyDefault) != cudaSuccess) {
    (void)cudaGetLastError();
    return want.size();
  }
  std::size_t bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) { bad += got[i] != want[i] ? 1 : 0; }
  return bad;
}

void write_pattern(void* p, std::size_t n, std::uint32_t seed)
{
  auto const v = pattern(n, seed);
  ASSERT_EQ(cudaMemcpy(p, v.data(), n, cudaMemcpyDefault), cudaSuccess);
}

struct offer {  // exporter -> importer, with the descriptor
  std::uint64_t bytes{};
  std::int32_t device{};
};
struct answer {  // importer -> exporter
  std::int32_t status{};
  std::uint64_t mismatches{};
  char error[256]{};
};

TEST(gpu_vmm_single_handle, is_usable_memory_and_imports_in_this_process)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  mr::vmm_pool_memory_resource pool;
  cudaStream_t s{};
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  void* p = pool.allocate_single_handle(bytes, s);
  write_pattern(p, bytes, exporters);
  auto e = pool.export_single_handle(p);
  EXPECT_EQ(e.bytes % pool.granularity(), 0U);
  EXPECT_GE(e.bytes, bytes);
  {
    imported_vmm_memory m{e.fd.get(), e.bytes};
    EXPECT_EQ(mismatches(m.get(), bytes, exporters), 0U) << "a second mapping of the same memory";
    write_pattern(m.get(), bytes, importers);
    EXPECT_EQ(mismatches(p, bytes, importers), 0U);
  }
  ASSERT_EQ(cudaMemsetAsync(p, 0, bytes, s), cudaSuccess);  // still queued when freed
  pool.deallocate(p, bytes, s);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(pool.trim_to(0), e.bytes);
  EXPECT_EQ(pool.stats().single_handle_allocations, 0U);
  EXPECT_EQ(pool.bad_deallocations(), 0U);
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST(gpu_vmm_single_handle, importer_role)
{
  char const* env = std::getenv(socket_env);
  if (env == nullptr) { GTEST_SKIP() << "runs only as the child of gpu_vmm_single_handle.ipc"; }
  int const sock = std::atoi(env);
  answer a{};
  try {
    offer o{};
    owned_fd fd = receive_with_fd(sock, bytes_of(o));
    ASSERT_EQ(cudaSetDevice(o.device), cudaSuccess);
    imported_vmm_memory m{fd.get(), o.bytes};
    a.mismatches = mismatches(m.get(), bytes, exporters);
    write_pattern(m.get(), bytes, importers);
  } catch (std::exception const& e) {
    a.status = 1;
    std::snprintf(a.error, sizeof a.error, "%s", e.what());
  }
  send_with_fd(sock, bytes_of(a));
  EXPECT_EQ(a.status, 0) << a.error;
}

TEST(gpu_vmm_single_handle, another_process_reads_and_writes_it)
{
  GPUMEM_SKIP_WITHOUT_GPU();
  mr::vmm_pool_memory_resource pool;
  void* p = pool.allocate_single_handle(bytes);
  write_pattern(p, bytes, exporters);
  auto e = pool.export_single_handle(p);

  int sv[2]{};
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  owned_fd parent_sock{sv[0]}, child_sock{sv[1]};
  ::fcntl(parent_sock.get(), F_SETFD, FD_CLOEXEC);
  pid_t const pid = test::spawn_self("gpu_vmm_single_handle.importer_role", socket_env,
                                     std::to_string(child_sock.get()));
  ASSERT_GT(pid, 0);
  child_sock.reset();
  offer const o{e.bytes, e.device};
  send_with_fd(parent_sock.get(), bytes_of(o), e.fd.get());
  answer a{};
  (void)receive_with_fd(parent_sock.get(), bytes_of(a));
  int status{};
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "importer status " << status;
  EXPECT_EQ(a.status, 0) << a.error;
  EXPECT_EQ(a.mismatches, 0U) << "the importer read the exporter's pattern";
  EXPECT_EQ(mismatches(p, bytes, importers), 0U) << "the exporter reads the importer's pattern";
  pool.deallocate(p, bytes);
  EXPECT_EQ(pool.bad_deallocations(), 0U);
}

}  // namespace
}  // namespace gpumem
