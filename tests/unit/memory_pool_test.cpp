// CI tests of the memory-pool API that need no GPU: property rules and their messages, capability
// diagnosis, access refusal, handle-type sets, owned descriptors and SCM_RIGHTS passing, the
// type-level rules (also in tests/compile_fail/), and that bad properties are refused before CUDA.
#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/cuda_async_view_memory_resource.hpp>
#include <gpumem/pool/device_pools.hpp>
#include <gpumem/ipc/fd_passing.hpp>
#include <gpumem/pool/ipc.hpp>
#include <gpumem/pool/memory_pool.hpp>
#include <gpumem/pool/pool_capabilities.hpp>

#include <support/backend.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <string>
#include <type_traits>

namespace gpumem {
namespace {

/// Expects `text` to contain `sub`; prints the text when it does not.
#define EXPECT_HAS(text, sub)                                                       \
  do {                                                                              \
    std::string const gpumem_text_{text};                                           \
    EXPECT_NE(gpumem_text_.find(sub), std::string::npos) << "in: " << gpumem_text_; \
  } while (0)

std::string rule_of(pool_properties p)
{
  return find_broken_rule(p);
}

TEST(HandleTypeSet, SetOperationsAndNames)
{
  handle_type_set const none{};
  EXPECT_TRUE(none.empty());
  EXPECT_TRUE(none.contains(allocation_handle_type::none));
  auto const both = allocation_handle_type::posix_file_descriptor | allocation_handle_type::fabric;
  EXPECT_EQ(both.bits(), 0x9U);
  EXPECT_TRUE(both.contains(allocation_handle_type::fabric));
  EXPECT_FALSE(both.contains(allocation_handle_type::none));
  EXPECT_FALSE(both.contains(allocation_handle_type::win32));
  EXPECT_TRUE(handle_type_set{allocation_handle_type::fabric}.is_subset_of(both));
  EXPECT_FALSE(both.is_subset_of(allocation_handle_type::fabric));
  EXPECT_EQ(both.minus(allocation_handle_type::fabric),
            handle_type_set{allocation_handle_type::posix_file_descriptor});
  EXPECT_EQ(to_string(none), "{none}");
  EXPECT_EQ(to_string(both), "{posix_file_descriptor, fabric}");
  EXPECT_EQ(to_string(handle_type_set::from_bits(0x11)), "{posix_file_descriptor, 0x10}");
}

TEST(PoolProperties, DefaultsAndCommonPoolsAreValid)
{
  EXPECT_EQ(rule_of({}), "");
  EXPECT_EQ(rule_of({.handle_types = allocation_handle_type::posix_file_descriptor}), "");
  EXPECT_EQ(rule_of({.location = pool_location::host()}), "");
  EXPECT_EQ(rule_of({.location     = pool_location::host_numa(0),
                     .handle_types = allocation_handle_type::posix_file_descriptor}),
            "");
  EXPECT_EQ(rule_of({.location        = pool_location::none(),
                     .allocation_type = pool_allocation_type::managed}),
            "");
  EXPECT_EQ(rule_of({.max_size_bytes = 1 << 20, .usage = pool_usage_hw_decompress}), "");
  EXPECT_NO_THROW(validate({}));
}

TEST(PoolProperties, EachRuleIsNamedWithTheValues)
{
  EXPECT_HAS(rule_of({.location = pool_location::device(-1)}), "R1");
  EXPECT_HAS(rule_of({.location = pool_location::device(-1)}), "got -1");
  EXPECT_HAS(rule_of({.location = pool_location::host_numa(-3)}), "R2");
  EXPECT_HAS(rule_of({.location     = pool_location::host(),
                      .handle_types = allocation_handle_type::posix_file_descriptor}),
             "R3: host pools cannot be IPC-capable");
  EXPECT_HAS(rule_of({.location = pool_location::none()}),
             "R4: location none (no preferred location) is only valid for managed");
  pool_properties managed{.allocation_type = pool_allocation_type::managed};
  auto m         = managed;
  m.handle_types = allocation_handle_type::fabric;
  EXPECT_HAS(rule_of(m), "R5: managed pools cannot be IPC-capable");
  EXPECT_HAS(rule_of(m), "{fabric}");
  m                = managed;
  m.max_size_bytes = 4096;
  EXPECT_HAS(rule_of(m), "R6: managed pools need max_size_bytes == 0 (got 4.00 KiB");
  m       = managed;
  m.usage = pool_usage_hw_decompress;
  EXPECT_HAS(rule_of(m), "R7: managed pools need usage == 0");
  EXPECT_HAS(rule_of({.handle_types = handle_type_set::from_bits(0x30)}),
             "R8: handle_types holds unknown bits 0x30");
  EXPECT_HAS(rule_of({.handle_types = allocation_handle_type::win32}),
             "R8: {win32} handles are Windows-only");
  EXPECT_HAS(rule_of({.usage = 0x41}), "R9: usage holds unknown bits 0x41");
}

TEST(PoolProperties, ValidateThrowsLogicErrorWithPropertiesAndRule)
{
  try {
    validate({.location     = pool_location::host(),
              .handle_types = allocation_handle_type::posix_file_descriptor});
    FAIL() << "expected logic_error";
  } catch (logic_error const& e) {
    EXPECT_HAS(e.what(), "invalid pool_properties (location host, pinned");
    EXPECT_HAS(e.what(), "R3");
  }
}

TEST(MemoryPool, InvalidPropertiesAreRefusedBeforeCuda)
{
  // Without a GPU a valid pool fails in the capability check (cuda_error); an invalid one must
  // fail earlier with logic_error, on any machine.
  pool_properties const managed_with_max{.allocation_type = pool_allocation_type::managed,
                                         .max_size_bytes  = 1 << 20};
  EXPECT_THROW(memory_pool{managed_with_max}, logic_error);
  EXPECT_THROW((void)memory_pool::create({.location     = pool_location::host(),
                                          .handle_types = allocation_handle_type::fabric}),
               logic_error);
}

TEST(MemoryPool, WithoutGpuCreationSaysWhy)
{
  if (test::gpu_available()) { GTEST_SKIP() << "a GPU is present; this checks the no-GPU path"; }
  try {
    memory_pool pool{{}};
    FAIL() << "created a pool without a GPU";
  } catch (cuda_error const& e) {
    EXPECT_EQ(e.status(), cudaErrorNotSupported);
    EXPECT_HAS(e.what(), "cannot create memory pool (location device 0");
    EXPECT_HAS(e.what(), "no usable CUDA device");
  }
}

pool_capabilities good_caps()
{
  pool_capabilities c{};
  c.device = 0, c.device_count = 2, c.driver_version = 13000, c.runtime_version = 13000;
  c.pools_supported               = true;
  c.supported_handle_types        = allocation_handle_type::posix_file_descriptor;
  c.host_pools_supported          = true;
  c.host_numa_pools_supported     = true;
  c.concurrent_managed_access_all = true;
  c.fabric_unavailable_reason     = "no IMEX channels";
  return c;
}

TEST(PoolCapabilities, DiagnosesWhyCreationCannotWork)
{
  pool_properties const plain{};
  EXPECT_EQ(diagnose_unsupported(plain, good_caps()), "");
  auto c            = good_caps();
  c.pools_supported = false;
  EXPECT_HAS(diagnose_unsupported(plain, c), "does not support memory pools");
  c                = good_caps();
  c.driver_version = 11010;
  EXPECT_HAS(diagnose_unsupported(plain, c),
             "memory pools need CUDA driver 11.2 or newer; this driver is 11.1");
  c                = good_caps();
  c.driver_version = 12040;
  EXPECT_HAS(diagnose_unsupported({.location = pool_location::host()}, c),
             "host pools need CUDA driver 12.6");
  pool_properties fabric{.handle_types = allocation_handle_type::fabric};
  EXPECT_HAS(diagnose_unsupported(fabric, good_caps()), "fabric handles unusable: no IMEX");
  c = good_caps();
  c.fabric_unavailable_reason.clear();  // IMEX present, but the device lacks fabric
  EXPECT_HAS(diagnose_unsupported(fabric, c),
             "does not support handle types {fabric} for pools (supported: "
             "{posix_file_descriptor})");
  c                        = good_caps();
  c.supported_handle_types = c.supported_handle_types | allocation_handle_type::fabric;
  EXPECT_HAS(diagnose_unsupported(fabric, c), "fabric handles unusable: no IMEX");
}

TEST(PoolCapabilities, DiagnosesLocationsAndDevices)
{
  auto c                 = good_caps();
  c.host_pools_supported = false;
  EXPECT_HAS(diagnose_unsupported({.location = pool_location::host()}, c),
             "does not support host pools");
  c                               = good_caps();
  c.concurrent_managed_access_all = false;
  EXPECT_HAS(diagnose_unsupported({.allocation_type = pool_allocation_type::managed}, c),
             "concurrentManagedAccess");
  EXPECT_HAS(diagnose_unsupported({.location = pool_location::device(5)}, good_caps()),
             "device 5 does not exist (2 devices)");
  c                        = good_caps();
  c.device_unusable_reason = "no usable CUDA device: X";
  EXPECT_EQ(diagnose_unsupported({}, c), "no usable CUDA device: X");
}

TEST(PoolCapabilities, QueryNeverThrowsAndFabricReasonIsGivenHere)
{
  auto const caps = query_pool_capabilities(cuda_device_id{0});
  if (!test::gpu_available()) { EXPECT_FALSE(caps.device_unusable_reason.empty()); }
  // These machines have no IMEX channels (GPU.md); a machine with them returns "".
  auto const why = why_fabric_unavailable();
  if (!why.empty()) { EXPECT_HAS(why, "IMEX"); }
}

TEST(PoolAccess, RefusalsSayWhy)
{
  using detail::access_refusal;
  auto const dev0 = pool_location::device(0);
  EXPECT_EQ(access_refusal({dev0, 1, access_flags::read_write, 2, true}), "");
  EXPECT_EQ(access_refusal({dev0, 0, access_flags::read_write, 2, false}), "");
  EXPECT_EQ(access_refusal({dev0, 1, access_flags::none, 2, false}), "");
  EXPECT_HAS(access_refusal({dev0, 1, access_flags::read_write, 2, false}),
             "device 1 cannot access memory of device 0: no peer capability "
             "(cudaDeviceCanAccessPeer(1, 0) == 0)");
  EXPECT_HAS(access_refusal({dev0, 2, access_flags::read, 2, true}),
             "device 2 does not exist (2 devices)");
  EXPECT_HAS(access_refusal({dev0, 0, access_flags::read, 2, true}),
             "always has read_write access; it cannot be reduced to read");
  EXPECT_EQ(access_refusal({pool_location::host(), 1, access_flags::read_write, 2, false}), "");
}

TEST(PoolAccess, AccessorsByLocation)
{
  using detail::access_refusal;
  auto const dev0 = pool_location::device(0);
  auto const host = location_kind::host;
  auto const numa = location_kind::host_numa;
  auto const none = location_kind::none;
  auto const rw   = access_flags::read_write;
  // The host and host NUMA nodes are not devices: no device count or peer rule applies to them.
  EXPECT_EQ(access_refusal({dev0, 0, rw, 1, false, host}), "");
  EXPECT_EQ(access_refusal({dev0, 7, rw, 1, false, numa}), "");
  EXPECT_HAS(access_refusal({dev0, -1, rw, 1, false, numa}),
             "host NUMA node -1 does not exist (ids are >= 0)");
  EXPECT_HAS(access_refusal({dev0, 0, rw, 1, false, none}),
             "location none cannot be given access: name a device, the host or a host NUMA node");
  // A descriptor is a location and flags; the default is read_write.
  access_descriptor const d{pool_location::host_numa(1)};
  EXPECT_EQ(d.flags, access_flags::read_write);
  EXPECT_EQ(d.accessor, pool_location::host_numa(1));
}

template <class Pool, class A>
concept can_set = requires(Pool const& p)
{
  p.template set<A>(typename A::value_type{});
};
template <class Pool, class A>
concept can_reset = requires(Pool const& p)
{
  p.template reset_high_water<A>();
};
template <class Pool>
concept can_allocate = requires(Pool const& p)
{
  p.allocate(std::size_t{1}, cuda_stream_view{});
};

TEST(PoolTypes, TypeLevelRules)
{
  static_assert(!std::is_copy_constructible_v<memory_pool>);
  static_assert(!std::is_copy_assignable_v<memory_pool>);
  static_assert(std::is_nothrow_move_constructible_v<memory_pool>);
  static_assert(std::is_copy_constructible_v<memory_pool_ref>);
  static_assert(std::is_convertible_v<memory_pool const&, memory_pool_ref>);
  static_assert(!std::is_convertible_v<imported_memory_pool const&, memory_pool_ref>);
  static_assert(!std::is_copy_constructible_v<imported_memory_pool>);
  static_assert(can_allocate<memory_pool_ref> && !can_allocate<imported_memory_pool>);
  static_assert(can_set<memory_pool_ref, pool_attr::release_threshold>);
  static_assert(can_set<memory_pool_ref, pool_attr::reuse_allow_opportunistic>);
  static_assert(!can_set<memory_pool_ref, pool_attr::used_mem_current>);
  static_assert(!can_set<memory_pool_ref, pool_attr::reserved_mem_high>);
  static_assert(can_reset<memory_pool_ref, pool_attr::reserved_mem_high>);
  static_assert(!can_reset<memory_pool_ref, pool_attr::used_mem_current>);
  static_assert(!std::is_copy_constructible_v<exported_allocation>);
  static_assert(!std::is_copy_constructible_v<imported_allocation>);
  static_assert(!std::is_copy_constructible_v<owned_fd>);
  static_assert(std::is_same_v<mr::cuda_async_memory_resource::allocation_handle_type,
                               allocation_handle_type>);
  SUCCEED();
}

bool fd_open(int fd)
{
  return ::fcntl(fd, F_GETFD) != -1;
}

TEST(OwnedFd, ClosesOnceAndMoves)
{
  std::array<int, 2> p{};
  ASSERT_EQ(::pipe(p.data()), 0);
  ::close(p[1]);
  {
    owned_fd a{p[0]};
    owned_fd b{std::move(a)};
    EXPECT_FALSE(a.valid());
    EXPECT_EQ(b.get(), p[0]);
    EXPECT_TRUE(fd_open(p[0]));
  }
  EXPECT_FALSE(fd_open(p[0]));
}

TEST(FdPassing, SendsADescriptorAndPayloadOverAUnixSocket)
{
  std::array<int, 2> sock{}, pipe_fds{};
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sock.data()), 0);
  ASSERT_EQ(::pipe(pipe_fds.data()), 0);
  owned_fd s0{sock[0]}, s1{sock[1]}, rd{pipe_fds[0]}, wr{pipe_fds[1]};
  std::array<std::byte, 8> out{std::byte{1}, std::byte{2}, std::byte{3}}, in{};
  send_with_fd(s0.get(), out, wr.get());
  owned_fd received = receive_with_fd(s1.get(), in);
  ASSERT_TRUE(received.valid());
  EXPECT_NE(received.get(), wr.get());
  EXPECT_EQ(in, out);
  char const c = 'x';
  ASSERT_EQ(::write(received.get(), &c, 1), 1);  // the received fd is the pipe's write end
  char got{};
  ASSERT_EQ(::read(rd.get(), &got, 1), 1);
  EXPECT_EQ(got, 'x');
  send_with_fd(s0.get(), out);  // payload without a descriptor
  EXPECT_FALSE(receive_with_fd(s1.get(), in).valid());
  s0.reset();
  EXPECT_THROW((void)receive_with_fd(s1.get(), in), logic_error);  // peer closed
  EXPECT_THROW(send_with_fd(s1.get(), std::span<std::byte const>{}), logic_error);
}

TEST(CudaAsync, BadArgumentsAreRefusedBeforeCuda)
{
  try {
    mr::cuda_async_memory_resource mr{{}, {}, allocation_handle_type::win32};
    FAIL() << "win32 handles accepted on POSIX";
  } catch (logic_error const& e) {
    EXPECT_HAS(e.what(), "Windows-only");
  }
  EXPECT_THROW(mr::cuda_async_view_memory_resource{cudaMemPool_t{}}, logic_error);
}

TEST(CudaAsync, WithoutGpuTheConstructorSaysUnsupported)
{
  if (test::gpu_available()) { GTEST_SKIP() << "a GPU is present; this checks the no-GPU path"; }
  try {
    mr::cuda_async_memory_resource mr{};
    FAIL() << "constructed without a GPU";
  } catch (logic_error const& e) {
    EXPECT_HAS(e.what(), "cuda_async_memory_resource");
  }
}

}  // namespace
}  // namespace gpumem
