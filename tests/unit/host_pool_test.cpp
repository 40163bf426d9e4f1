// The pool API over the host stand-in's pool model: attributes and statistics, the release
// threshold at synchronizations, trimming, the three reuse policies, max_size, default and current
// pools, access by location, export/import of pools and pointers in one process, frees across
// allocators, pointer queries, and a randomized sequence with invariants. The GPU suites
// (tests/gpu/*pool*) prove CUDA's behaviour; these prove ours in CI.
#include <gpumem/detail/forwarding_runtime.hpp>
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/cuda_async_view_memory_resource.hpp>
#include <gpumem/mr/current_pool_memory_resource.hpp>
#include <gpumem/pool/device_pools.hpp>
#include <gpumem/pool/ipc.hpp>
#include <gpumem/pool/memory_pool.hpp>
#include <gpumem/pool/pointer_query.hpp>

#include <gtest/gtest.h>

#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace gpumem {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t seg = 2 * MiB;  // the model's pool granularity

#define EXPECT_HAS(text, sub)                                                       \
  do {                                                                              \
    std::string const gpumem_text_{text};                                           \
    EXPECT_NE(gpumem_text_.find(sub), std::string::npos) << "in: " << gpumem_text_; \
  } while (0)

struct host_pool : ::testing::Test {
  detail::host_runtime rt{detail::host_runtime_options{
      .capacity_bytes = 256 * MiB, .backed = false, .device_count = 2}};
  cudaStream_t a = rt.create_stream();
  cudaStream_t b = rt.create_stream();

  memory_pool make(pool_properties props = {})
  {
    if (props.location.kind == location_kind::device && props.location.id < 0) {
      props.location = pool_location::device(0);
    }
    return memory_pool{props, rt};
  }
  std::uint64_t reserved(memory_pool_ref const& p)
  {
    return p.get<pool_attr::reserved_mem_current>();
  }
  std::uint64_t used(memory_pool_ref const& p) { return p.get<pool_attr::used_mem_current>(); }
};

TEST_F(host_pool, AttributesHaveTheSeedsDefaultsAndRoundTrip)
{
  auto pool = make();
  EXPECT_TRUE(pool.get<pool_attr::reuse_follow_event_dependencies>());
  EXPECT_TRUE(pool.get<pool_attr::reuse_allow_opportunistic>());
  EXPECT_TRUE(pool.get<pool_attr::reuse_allow_internal_dependencies>());
  EXPECT_EQ(pool.get<pool_attr::release_threshold>(), 0U);
  pool.set<pool_attr::release_threshold>(5 * MiB);
  pool.set<pool_attr::reuse_allow_opportunistic>(false);
  EXPECT_EQ(pool.get<pool_attr::release_threshold>(), 5 * MiB);
  EXPECT_FALSE(pool.get<pool_attr::reuse_allow_opportunistic>());
  EXPECT_EQ(pool.usage_statistics().reserved_bytes, 0U);
}

TEST_F(host_pool, StatisticsAndHighMarksFollowAllocations)
{
  auto pool = make();
  void* p   = pool.allocate(3 * MiB, a);  // one 4 MiB segment (2 MiB granules)
  void* q   = pool.allocate(MiB, a);
  EXPECT_EQ(reserved(pool), 6 * MiB);
  EXPECT_EQ(used(pool), 6 * MiB);
  pool.deallocate(q, a);
  EXPECT_EQ(used(pool), 4 * MiB);
  EXPECT_EQ(pool.get<pool_attr::used_mem_high>(), 6 * MiB);
  pool.reset_high_water_marks();
  EXPECT_EQ(pool.get<pool_attr::used_mem_high>(), 4 * MiB) << "reset to the current value";
  EXPECT_EQ(pool.get<pool_attr::reserved_mem_high>(), 6 * MiB);
  pool.deallocate(p, a);
  rt.stream_synchronize(a);  // threshold 0: everything free is released at a synchronization
  EXPECT_EQ(reserved(pool), 0U);
  EXPECT_EQ(pool.get<pool_attr::reserved_mem_high>(), 6 * MiB);
}

TEST_F(host_pool, ReleaseThresholdBetweenZeroAndMaxAppliesAtEachKindOfSynchronization)
{
  auto pool = make();
  pool.set<pool_attr::release_threshold>(5 * MiB);
  auto fill_and_free = [&] {
    std::vector<void*> ps;
    for (int i = 0; i < 4; ++i) { ps.push_back(pool.allocate(4 * MiB, a)); }
    for (void* p : ps) { pool.deallocate(p, a); }
    EXPECT_EQ(reserved(pool), 16 * MiB) << "frees keep the memory until a synchronization";
  };
  fill_and_free();
  rt.stream_synchronize(a);
  EXPECT_EQ(reserved(pool), 4 * MiB) << "released down to the threshold (whole segments)";
  fill_and_free();
  auto ev = rt.event_create();
  rt.event_record(ev, a);
  rt.event_synchronize(ev);
  EXPECT_EQ(reserved(pool), 4 * MiB);
  rt.event_destroy(ev);
  fill_and_free();
  rt.device_synchronize();
  EXPECT_EQ(reserved(pool), 4 * MiB);
  pool.set<pool_attr::release_threshold>(std::numeric_limits<std::uint64_t>::max());
  fill_and_free();
  rt.device_synchronize();
  EXPECT_EQ(reserved(pool), 16 * MiB) << "the maximum threshold keeps everything";
}

TEST_F(host_pool, TrimToKeepsAboutNAndNeverReleasesAnIncompleteFree)
{
  auto pool = make();
  pool.set<pool_attr::release_threshold>(std::numeric_limits<std::uint64_t>::max());
  std::vector<void*> ps;
  for (int i = 0; i < 4; ++i) { ps.push_back(pool.allocate(4 * MiB, a)); }
  rt.enqueue(a);  // work using them, still running
  for (void* p : ps) { pool.deallocate(p, a); }
  pool.trim_to(0);
  EXPECT_EQ(reserved(pool), 16 * MiB) << "frees not yet complete are not released";
  rt.complete(a);
  pool.trim_to(9 * MiB);
  EXPECT_EQ(reserved(pool), 8 * MiB) << "released until at most 9 MiB remain";
  pool.trim_to(0);
  EXPECT_EQ(reserved(pool), 0U);
}

TEST_F(host_pool, SameStreamReuseNeedsNoPolicy)
{
  auto pool = make();
  pool.set<pool_attr::reuse_follow_event_dependencies>(false);
  pool.set<pool_attr::reuse_allow_opportunistic>(false);
  pool.set<pool_attr::reuse_allow_internal_dependencies>(false);
  void* p = pool.allocate(MiB, a);
  rt.enqueue(a);
  pool.deallocate(p, a);
  EXPECT_EQ(pool.allocate(MiB, a), p) << "stream order makes the reuse safe";
}

TEST_F(host_pool, OpportunisticReuseWaitsForTheFreeToComplete)
{
  auto pool = make();
  pool.set<pool_attr::release_threshold>(std::numeric_limits<std::uint64_t>::max());
  pool.set<pool_attr::reuse_allow_internal_dependencies>(false);
  void* p = pool.allocate(MiB, a);
  rt.enqueue(a);
  pool.deallocate(p, a);
  void* q = pool.allocate(MiB, b);
  EXPECT_NE(q, p) << "the free on a has not completed";
  pool.deallocate(q, b);
  rt.complete(a);
  EXPECT_EQ(pool.allocate(MiB, b), p) << "completed: reused opportunistically";
}

TEST_F(host_pool, WithoutOpportunisticReuseACompletedFreeStaysWithItsStream)
{
  auto pool = make();
  pool.set<pool_attr::release_threshold>(std::numeric_limits<std::uint64_t>::max());
  pool.set<pool_attr::reuse_allow_opportunistic>(false);
  pool.set<pool_attr::reuse_allow_internal_dependencies>(false);
  void* p = pool.allocate(MiB, a);
  pool.deallocate(p, a);
  rt.complete(a);
  EXPECT_NE(pool.allocate(MiB, b), p) << "repeatable: no reuse across streams without a dependency";
}

TEST_F(host_pool, EventDependencyReuse)
{
  auto pool = make();
  pool.set<pool_attr::release_threshold>(std::numeric_limits<std::uint64_t>::max());
  pool.set<pool_attr::reuse_allow_opportunistic>(false);
  pool.set<pool_attr::reuse_allow_internal_dependencies>(false);
  void* p = pool.allocate(MiB, a);
  rt.enqueue(a);
  pool.deallocate(p, a);
  auto ev = rt.event_create();
  rt.event_record(ev, a);  // after the free
  rt.stream_wait_event(b, ev);
  EXPECT_EQ(pool.allocate(MiB, b), p) << "b waits for the free: the block may be reused";
  pool.set<pool_attr::reuse_follow_event_dependencies>(false);
  void* q = pool.allocate(MiB, a);
  pool.deallocate(q, a);
  auto ev2 = rt.event_create();
  rt.event_record(ev2, a);
  rt.stream_wait_event(b, ev2);
  EXPECT_NE(pool.allocate(MiB, b), q) << "policy off: the dependency is not followed";
  rt.event_destroy(ev);
  rt.event_destroy(ev2);
}

TEST_F(host_pool, InternalDependenciesMakeTheStreamWait)
{
  auto pool = make({.location = pool_location::device(0), .max_size_bytes = 2 * MiB});
  pool.set<pool_attr::reuse_allow_opportunistic>(false);
  pool.set<pool_attr::reuse_follow_event_dependencies>(false);
  void* p = pool.allocate(MiB, a);
  rt.enqueue(a);  // a's work is still running
  pool.deallocate(p, a);
  EXPECT_EQ(pool.allocate(MiB, b), p) << "the pool is full: reuse with a dependency";
  rt.enqueue(b);
  rt.complete(b);
  EXPECT_LT(rt.completed(b), rt.enqueued(b)) << "b's work waits for a's";
  rt.complete(a);
  rt.complete(b);
  EXPECT_EQ(rt.completed(b), rt.enqueued(b));
  pool.deallocate(p, b);
  pool.set<pool_attr::reuse_allow_internal_dependencies>(false);
  void* q = pool.allocate(MiB, b);
  rt.enqueue(b);
  pool.deallocate(q, b);
  EXPECT_THROW((void)pool.allocate(MiB, a), out_of_memory)
      << "all policies off and the cap reached: no reuse, no growth";
}

TEST_F(host_pool, MaxSizePushedPastIsOutOfMemoryNamingTheDeviceAndThePoolStaysUsable)
{
  auto pool = make({.location = pool_location::device(1), .max_size_bytes = 8 * MiB});
  void* p   = pool.allocate(6 * MiB, a);
  try {
    (void)pool.allocate(4 * MiB, a);
    ADD_FAILURE() << "the cap was ignored";
  } catch (out_of_memory const& e) {
    EXPECT_HAS(e.what(), "on device 1");
    EXPECT_HAS(e.what(), "pool reserves 6.00 MiB");
  }
  void* q = pool.allocate(2 * MiB, a);
  pool.deallocate(q, a);
  pool.deallocate(p, a);
}

TEST_F(host_pool, DefaultAndCurrentPoolsPerDevice)
{
  auto def0 = default_pool(cuda_device_id{0}, rt);
  EXPECT_TRUE(def0 == current_pool(cuda_device_id{0}, rt));
  EXPECT_FALSE(def0 == default_pool(cuda_device_id{1}, rt));
  EXPECT_EQ(def0.access(cuda_device_id{0}), access_flags::read_write);
  EXPECT_EQ(def0.access(cuda_device_id{1}), access_flags::none);
  auto mine = make();
  mr::current_pool_memory_resource mr{rt};
  {
    scoped_current_pool guard{cuda_device_id{0}, mine};
    EXPECT_TRUE(current_pool(cuda_device_id{0}, rt) == mine);
    void* p = mr.allocate(MiB, a);
    EXPECT_TRUE(mine.owns(p));
    mr.deallocate(p, MiB, a);
  }
  EXPECT_TRUE(current_pool(cuda_device_id{0}, rt) == def0) << "the guard restores";
  void* p = mr.allocate(MiB, a);
  EXPECT_TRUE(def0.owns(p));
  mr.deallocate(p, MiB, a);
  auto on1 = make({.location = pool_location::device(1)});
  EXPECT_THROW(set_current_pool(cuda_device_id{0}, on1), logic_error);
  mr::cuda_async_view_memory_resource view{on1.handle(), rt};
  EXPECT_EQ(view.pool().location(), pool_location::device(1)) << "its device, not the current";
}

TEST_F(host_pool, AccessByDeviceAndByLocationList)
{
  auto pool = make();
  EXPECT_EQ(pool.access(cuda_device_id{1}), access_flags::none);
  try {  // as driver 580 on two H100s: read-only access by a device is refused
    pool.set_access(cuda_device_id{1}, access_flags::read);
    ADD_FAILURE() << "read-only access by a device was accepted";
  } catch (cuda_error const& e) {
    EXPECT_EQ(e.status(), cudaErrorNotSupported);
    EXPECT_HAS(e.what(), "give read_write or none");
  }
  EXPECT_EQ(pool.access(cuda_device_id{1}), access_flags::none);
  pool.set_access(cuda_device_id{1}, access_flags::read_write);
  std::vector<access_descriptor> const bad{{pool_location::device(1), access_flags::read_write},
                                           {pool_location::device(5), access_flags::read}};
  EXPECT_THROW(pool.set_access(bad), logic_error);
  EXPECT_EQ(pool.access(cuda_device_id{1}), access_flags::read_write)
      << "a refused list changes nothing";
  pool.set_access(cuda_device_id{1}, access_flags::none);
  std::vector<access_descriptor> const good{{pool_location::device(0), access_flags::read_write},
                                            {pool_location::device(1), access_flags::read_write}};
  pool.set_access(good);
  EXPECT_EQ(pool.access(cuda_device_id{1}), access_flags::read_write);
  EXPECT_THROW(pool.set_access(pool_location::host(), access_flags::read_write), cuda_error);
  memory_pool host{{.location = pool_location::host()}, rt};
  host.set_access(pool_location::device(0), access_flags::read_write);
  EXPECT_EQ(host.access(cuda_device_id{0}), access_flags::read_write);
  void* p = host.allocate(MiB, a);
  EXPECT_EQ(query_pointer(p, rt).type, cudaMemoryTypeHost);
  host.deallocate(p, a);
}

TEST_F(host_pool, ExportImportInOneProcessFollowsTheProtocol)
{
  auto pool = make({.location     = pool_location::device(1),
                    .handle_types = allocation_handle_type::posix_file_descriptor});
  exported_allocation early{pool, MiB, a};
  try {
    (void)early.export_data();
    ADD_FAILURE() << "an allocation was shared before its pool";
  } catch (cuda_error const& e) {
    EXPECT_HAS(e.what(), "share the pool first");
  }
  early.free_unshared(a);
  auto handle = pool.export_handle();
  ASSERT_GE(handle.fd(), 0);
  imported_memory_pool imp{handle, rt};
  EXPECT_EQ(imp.location(), std::optional{pool_location::device(1)}) << "found, not guessed";
  EXPECT_THROW((void)imp.get<pool_attr::used_mem_current>(), cuda_error)
      << "as driver 580: statistics of an imported pool are refused";
  imp.set_access(cuda_device_id{0});
  EXPECT_EQ(imp.access(cuda_device_id{0}), access_flags::read_write);
  EXPECT_EQ(pool.access(cuda_device_id{0}), access_flags::none) << "not shared with the exporter";

  // Any allocation of the shared pool can be exported (export_pointer), not only an
  // exported_allocation. (The IPC events of the free protocol need a GPU: the GPU suite runs it.)
  void* shared    = pool.allocate(3 * MiB, a);
  auto const data = export_pointer(shared, rt);
  void* plain     = make().allocate(MiB, a);
  EXPECT_THROW((void)export_pointer(plain, rt), cuda_error) << "a pool without handle types";
  EXPECT_THROW((void)imp.import_pointer(pointer_export_data{}, 1), cuda_error);
  std::vector<imported_memory_pool> importers;  // several importers of one pool
  importers.emplace_back(pool.export_handle(), rt);
  importers.emplace_back(pool.export_handle(), rt);
  {
    auto got = imp.import_pointer(data, 3 * MiB);
    EXPECT_EQ(got.get(), shared) << "one process: the same address";
    auto got1 = importers[0].import_pointer(data, 3 * MiB);
    auto got2 = importers[1].import_pointer(data, 3 * MiB);
    EXPECT_EQ(query_pointer(got1.get(), rt).pool, pool.handle());
  }  // the importers' destructor path: synchronize, then free (cudaFree) their mappings
  EXPECT_EQ(importers[0].handle(), imp.handle()) << "as the driver: one handle per pool";
  importers.clear();  // destroying two of the three holders keeps the pool imported
  {
    auto still = imp.import_pointer(data, 3 * MiB);
    EXPECT_EQ(still.get(), shared);
  }
  EXPECT_EQ(used(pool), 4 * MiB) << "the exporter's allocation is still live";
  pool.deallocate(shared, a);  // the exporter frees last
  rt.device_synchronize();
  EXPECT_EQ(used(pool), 0U);
  EXPECT_EQ(reserved(pool), 0U);
}

TEST_F(host_pool, FreesAcrossAllocators)
{
  void* m = rt.allocate(detail::memory_kind::device, 3 * MiB);  // cudaMalloc memory...
  EXPECT_EQ(rt.free_async(m, a), cudaSuccess);                  // ...freed with cudaFreeAsync
  EXPECT_EQ(rt.memory_info().free_bytes, 256 * MiB);
  auto pool = make();
  void* p   = pool.allocate(MiB, a);
  rt.enqueue(a);
  rt.device_synchronize();
  rt.free(detail::memory_kind::device, p);  // pool memory freed with cudaFree after a sync
  EXPECT_EQ(used(pool), 0U);
  EXPECT_EQ(rt.free_async(p, a), cudaErrorInvalidValue) << "a second free is refused";
}

TEST_F(host_pool, PointerQueriesNameThePoolAndDevice)
{
  auto pool = make({.location = pool_location::device(1)});
  void* p   = pool.allocate(3 * MiB, a);
  auto info = query_pointer(static_cast<char*>(p) + 7, rt);
  EXPECT_EQ(info.type, cudaMemoryTypeDevice);
  EXPECT_EQ(info.device, 1);
  EXPECT_EQ(info.pool, pool.handle());
  EXPECT_EQ(info.base, p);
  EXPECT_EQ(info.size, 3 * MiB);
  EXPECT_TRUE(pool.owns(p));
  EXPECT_FALSE(default_pool(cuda_device_id{1}, rt).owns(p));
  int on_host{};
  EXPECT_EQ(query_pointer(&on_host, rt).type, cudaMemoryTypeUnregistered);
  EXPECT_THROW((void)export_pointer(&on_host, rt), logic_error);
  pool.deallocate(p, a);
}

TEST_F(host_pool, CudaAsyncResourceDefaultsOverTheModel)
{
  mr::cuda_async_memory_resource mr{std::nullopt, std::nullopt, std::nullopt, rt};
  EXPECT_EQ(mr.pool().get<pool_attr::release_threshold>(), 256 * MiB) << "the device's total";
  EXPECT_GE(reserved(mr.pool()), 128 * MiB - seg) << "half the free memory reserved up front";
  void* p = mr.allocate(MiB, a);
  EXPECT_TRUE(mr.pool().owns(p));
  mr.deallocate(p, MiB, a);
}

TEST_F(host_pool, DestroyingAPoolWithLiveAllocationsDefersItsRelease)
{
  void* p{};
  {
    auto pool = make();
    p         = pool.allocate(MiB, a);
  }
  EXPECT_LT(rt.memory_info().free_bytes, 256 * MiB) << "still held by the live allocation";
  EXPECT_EQ(rt.free_async(p, a), cudaSuccess);
  EXPECT_EQ(rt.memory_info().free_bytes, 256 * MiB) << "released with the last allocation";
}

TEST_F(host_pool, RandomSequencesKeepTheStatisticsConsistent)
{
  std::mt19937 rng{20261125};
  auto pool = make({.location = pool_location::device(0), .max_size_bytes = 64 * MiB});
  cudaStream_t const streams[] = {a, b};
  struct live {
    void* p;
    cudaStream_t s;
  };
  std::vector<live> lives;
  for (int step = 0; step < 4000; ++step) {
    auto const op = rng() % 10;
    auto const s  = streams[rng() % 2];
    if (op < 5) {
      try {
        lives.push_back({pool.allocate(1 + rng() % (5 * MiB), s), s});
      } catch (out_of_memory const&) {
      }
    } else if (op < 8 && !lives.empty()) {
      auto const k = rng() % lives.size();
      pool.deallocate(lives[k].p, rng() % 2 == 0 ? lives[k].s : s);
      lives.erase(lives.begin() + static_cast<std::ptrdiff_t>(k));
    } else if (op == 8) {
      rt.enqueue(s);
      if (rng() % 2 == 0) { rt.complete(streams[rng() % 2]); }
    } else {
      pool.set<pool_attr::release_threshold>((rng() % 4) * 8 * MiB);
      if (rng() % 2 == 0) {
        rt.stream_synchronize(s);
      } else {
        pool.trim_to((rng() % 4) * 8 * MiB);
      }
    }
    auto const st = pool.usage_statistics();
    ASSERT_LE(st.used_bytes, st.reserved_bytes);
    ASSERT_LE(st.reserved_bytes, 64 * MiB) << "max_size holds";
    ASSERT_GE(st.reserved_high_bytes, st.reserved_bytes);
    ASSERT_GE(st.used_high_bytes, st.used_bytes);
    ASSERT_EQ(256 * MiB - rt.memory_info().free_bytes, st.reserved_bytes)
        << "the device holds exactly what the pool reserves";
  }
  for (auto const& l : lives) { pool.deallocate(l.p, l.s); }
  pool.set<pool_attr::release_threshold>(0);
  rt.device_synchronize();
  EXPECT_EQ(reserved(pool), 0U) << "everything free is released at threshold 0";
}

// -- importers whose home device they cannot name ------------------------------------------------

/// Two devices without peer capability: a peer check of ours would refuse any grant to device 0
/// of memory that lives on device 1.
struct host_pool_no_peers : ::testing::Test {
  detail::host_runtime rt{detail::host_runtime_options{
      .capacity_bytes = 256 * MiB, .backed = false, .device_count = 2, .peer_access = false}};
  cudaStream_t a = rt.create_stream();
  memory_pool pool{{.location     = pool_location::device(1),
                    .handle_types = allocation_handle_type::posix_file_descriptor},
                   rt};
};

TEST_F(host_pool_no_peers, AKnownHomeIsCheckedForPeerCapability)
{
  imported_memory_pool imp{pool.export_handle(), rt};
  ASSERT_EQ(imp.location(), std::optional{pool_location::device(1)});
  try {
    imp.set_access(cuda_device_id{0});
    ADD_FAILURE() << "access without peer capability was granted";
  } catch (cuda_error const& e) {
    EXPECT_EQ(e.status(), cudaErrorPeerAccessUnsupported);
    EXPECT_HAS(e.what(), "device 0 cannot access memory of device 1");
  }
  EXPECT_EQ(imp.access(cuda_device_id{0}), access_flags::none);
}

TEST_F(host_pool_no_peers, AnUnknownHomeLeavesTheDecisionToCuda)
{
  imported_memory_pool imp{pool.export_handle(), pool_location::none(), rt};
  EXPECT_FALSE(imp.location().has_value()) << "none() means: home unknown";
  // No peer check of ours (it would need the home's number in this process's numbering): the
  // entry goes to CUDA as given, and the stand-in, like the driver for peers it can map, grants it.
  imp.set_access(cuda_device_id{0});
  EXPECT_EQ(imp.access(cuda_device_id{0}), access_flags::read_write);
  // The entry for the real home is passed on too, not dropped as "the owner's".
  imp.set_access(cuda_device_id{1});
  EXPECT_EQ(imp.access(cuda_device_id{1}), access_flags::read_write);
  // What needs no home is still checked before CUDA: a device this process does not have.
  try {
    imp.set_access(cuda_device_id{5});
    ADD_FAILURE() << "a device that does not exist was accepted";
  } catch (logic_error const& e) {
    EXPECT_HAS(e.what(), "device 5 does not exist (2 devices)");
  }
  // And CUDA's own refusals come back as cuda_error (read-only by a device, as driver 580).
  EXPECT_THROW(imp.set_access(cuda_device_id{0}, access_flags::read), cuda_error);
}

TEST_F(host_pool_no_peers, AHomeInAnotherProcesssNumberingIsRefusedNotTrusted)
{
  // The exporter's pool.location() under another CUDA_VISIBLE_DEVICES: here it names the
  // importer's own device 0 (nothing would be granted, silently) or no device at all.
  try {
    imported_memory_pool imp{pool.export_handle(), pool_location::device(0), rt};
    ADD_FAILURE() << "a home that CUDA contradicts was accepted";
  } catch (logic_error const& e) {
    EXPECT_HAS(e.what(), "on device 1 of this process, not on the given home device 0");
    EXPECT_HAS(e.what(), "CUDA_VISIBLE_DEVICES");
  }
  try {
    imported_memory_pool imp{pool.export_handle(), pool_location::device(3), rt};
    ADD_FAILURE() << "a home device that does not exist here was accepted";
  } catch (logic_error const& e) {
    EXPECT_HAS(e.what(), "device 3 does not exist in this process (2 visible devices)");
  }
  imported_memory_pool right{pool.export_handle(), pool_location::device(1), rt};
  EXPECT_EQ(right.location(), std::optional{pool_location::device(1)});
  // The refused imports released their handles: the pool is imported once, by `right`.
  void* p         = pool.allocate(MiB, a);
  auto const data = export_pointer(p, rt);
  {
    auto got = right.import_pointer(data, MiB);
    EXPECT_EQ(got.get(), p);
  }
  pool.deallocate(p, a);
}

// -- host pools, views, null pools ---------------------------------------------------------------

TEST_F(host_pool, HostPoolsAreReadWriteForTheCpuFromTheStart)
{
  memory_pool host{{.location = pool_location::host()}, rt};
  EXPECT_EQ(host.access(pool_location::host()), access_flags::read_write);
  // (The stand-in's device reports no host NUMA pools; the GPU suite asks the H100 about them.)
  EXPECT_EQ(host.access(cuda_device_id{0}), access_flags::none) << "devices until granted";
  auto device_pool = make();
  EXPECT_EQ(device_pool.access(pool_location::host()), access_flags::none);
  EXPECT_EQ(device_pool.access(cuda_device_id{0}), access_flags::read_write);
}

TEST_F(host_pool, AViewOverAHostPoolIsRefusedSayingSo)
{
  memory_pool host{{.location = pool_location::host()}, rt};
  for (int round = 0; round < 2; ++round) {
    try {
      mr::cuda_async_view_memory_resource view{host.handle(), rt};
      ADD_FAILURE() << "a view over a host pool was built (round " << round << ")";
    } catch (logic_error const& e) {
      EXPECT_HAS(e.what(), "holds pinned host memory (a host or host NUMA pool)");
      EXPECT_EQ(std::string{e.what()}.find("several devices"), std::string::npos) << e.what();
    }
    // With device 0 given access, device 0 is the only device with read-write access; the pool
    // is still a host pool.
    host.set_access(pool_location::device(0), access_flags::read_write);
  }
  // A device pool is viewed as before.
  auto pool = make({.location = pool_location::device(1)});
  mr::cuda_async_view_memory_resource view{pool.handle(), rt};
  EXPECT_EQ(view.pool().location(), pool_location::device(1));
}

/// Says the device has no memory pools (cudaDevAttrMemoryPoolsSupported == 0), or an old driver.
struct no_pools_runtime final : detail::forwarding_runtime {
  using forwarding_runtime::forwarding_runtime;
  int driver = 0;  ///< 0: the inner runtime's
  int device_attribute(cudaDeviceAttr attr, int device) override
  {
    if (attr == cudaDevAttrMemoryPoolsSupported) { return 0; }
    return forwarding_runtime::device_attribute(attr, device);
  }
  int driver_version() noexcept override
  {
    return driver != 0 ? driver : forwarding_runtime::driver_version();
  }
};

TEST_F(host_pool, TheViewsConstructorChecksStreamOrderedAllocationSupport)
{
  auto pool = make();
  no_pools_runtime no_pools{rt};
  try {
    mr::cuda_async_view_memory_resource view{pool.handle(), no_pools};
    ADD_FAILURE() << "a view was built on a device without memory pools";
  } catch (logic_error const& e) {
    EXPECT_HAS(e.what(), "cuda_async_view_memory_resource: cudaMallocAsync is not supported");
    EXPECT_HAS(e.what(), "device 0 does not support memory pools");
  }
  no_pools.driver = 11010;
  try {
    mr::cuda_async_view_memory_resource view{pool.handle(), no_pools};
    ADD_FAILURE() << "a view was built over a driver older than 11.2";
  } catch (logic_error const& e) {
    EXPECT_HAS(e.what(), "driver version 11010 is older than");
  }
  mr::cuda_async_view_memory_resource fine{pool.handle(), rt};  // the same pool, supported
  fine.deallocate(fine.allocate(MiB, a), MiB, a);
}

TEST_F(host_pool, NullAndEmptyPoolsAreRefusedWithLogicError)
{
  try {
    memory_pool_ref ref{cudaMemPool_t{}, pool_location::device(0), rt};
    ADD_FAILURE() << "a null pool handle was accepted";
  } catch (logic_error const& e) {
    EXPECT_HAS(e.what(), "memory_pool_ref: the memory pool is empty (moved-from or null)");
  }
  try {
    mr::cuda_async_view_memory_resource view{cudaMemPool_t{}, rt};
    ADD_FAILURE() << "a null pool handle was accepted";
  } catch (logic_error const& e) {
    EXPECT_HAS(e.what(), "the pool handle is null");
  }
  auto pool  = make();
  auto moved = std::move(pool);
  try {
    mr::cuda_async_view_memory_resource view{memory_pool_ref{pool}};
    ADD_FAILURE() << "a view over a moved-from pool was built";
  } catch (logic_error const& e) {
    EXPECT_HAS(e.what(), "the pool is empty (a moved-from memory_pool)");
  }
  EXPECT_THROW((void)pool.allocate(MiB, a), logic_error);
  mr::cuda_async_view_memory_resource live{memory_pool_ref{moved}};
  live.deallocate(live.allocate(MiB, a), MiB, a);
}

}  // namespace
}  // namespace gpumem
