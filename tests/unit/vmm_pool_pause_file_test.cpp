// Pause to a file and pause that waits only for named streams, over the host stand-in (backed:
// real bytes). pause_mode::offload_to_file: every byte back at every address, several cycles, the
// pinned host memory bounded by two slots (not the pool's size), the file unnamed and closed by
// resume and by the destructor, a missing directory and a full disk refused before anything is
// given back, a failed copy put back from the file, a failed resume kept paused with its file.
// pause(mode, streams): the streams named are synchronized (each once), work on any other stream
// is not waited for and the device is not synchronized; their free blocks are trimmed. Regions
// pass both through.
#include "vmm_pause_fixture.hpp"

#include <gpumem/mr/vmm_pool_memory_resource.hpp>
#include <gpumem/mr/vmm_region_resource.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace gpumem::test {
namespace {

using vmm_pool = mr::vmm_pool_memory_resource;

/// How many entries a directory holds (files left behind by an offload).
std::size_t entries(std::string const& dir)
{
  std::size_t n = 0;
  for ([[maybe_unused]] auto const& e : std::filesystem::directory_iterator{dir}) { ++n; }
  return n;
}

/// Whether the file system of `dir` reserves a file's space up front (fallocate).
bool reserves_space(std::string const& dir)
{
  auto const name = dir + "/probe";
  int const fd    = ::open(name.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) { return false; }
  bool const ok = ::fallocate(fd, 0, 0, 4096) == 0;
  ::close(fd);
  ::unlink(name.c_str());
  return ok;
}

/// How many descriptors this process has open.
std::size_t open_descriptors()
{
  return entries("/proc/self/fd");
}

struct vmm_pool_pause_file : vmm_pause_fixture {
  std::string dir;

  void SetUp() override
  {
    auto base        = std::filesystem::temp_directory_path() / "gpumem-pause-file-XXXXXX";
    std::string name = base.string();
    ASSERT_NE(::mkdtemp(name.data()), nullptr);
    dir = name;
  }
  void TearDown() override { std::filesystem::remove_all(dir); }

  vmm_pool make(mr::vmm_pool_options o = {})
  {
    if (o.offload_directory.empty()) { o.offload_directory = dir; }
    return vmm_pause_fixture::make(o);
  }
};

// -- offload to a file --------------------------------------------------------------------------

TEST_F(vmm_pool_pause_file, OffloadToFileRestoresEveryByteAtTheSameAddresses)
{
  auto pool         = make();
  auto live         = populate(pool);
  auto const before = pool.stats();
  auto const fds    = open_descriptors();
  ASSERT_TRUE(pool.pause(pause_mode::offload_to_file));
  EXPECT_EQ(pool.state(), pause_state::paused_offloaded);
  EXPECT_EQ(rt.vmm_state().physical_bytes, 0U);
  EXPECT_EQ(rt.vmm_state().reservations, 1U);
  auto const paused = pool.stats();
  EXPECT_EQ(paused.paused_bytes, before.mapped_bytes);
  EXPECT_EQ(paused.offload_file_bytes, before.mapped_bytes);
  EXPECT_LT(paused.staging_bytes, before.mapped_bytes + 8192);  // two slots of half the layout
  EXPECT_EQ(entries(dir), 0U);                                  // the file has no name
  EXPECT_EQ(open_descriptors(), fds + 1);                       // but is open
  check(pool);
  ASSERT_TRUE(pool.resume());
  expect_intact(live);
  auto const after = pool.stats();
  EXPECT_EQ(after.mapped_bytes, before.mapped_bytes);
  EXPECT_EQ(after.offload_file_bytes, 0U);
  EXPECT_EQ(after.staging_bytes, 0U);  // keep_offload_staging is off
  EXPECT_EQ(open_descriptors(), fds);  // resume closed the file
  check(pool);
  release(pool, live);
  check(pool);
}

TEST_F(vmm_pool_pause_file, SeveralPauseToFileAndResumeCyclesKeepEveryWrite)
{
  auto pool = make({.keep_offload_staging = true});
  auto live = populate(pool);
  for (unsigned round = 0; round < 4; ++round) {
    fill(live[1].p, live[1].n, 100 + round);  // new contents each time
    auto const mode = round == 2 ? pause_mode::offload : pause_mode::offload_to_file;  // mixed
    ASSERT_TRUE(pool.pause(mode)) << "round " << round;
    ASSERT_TRUE(pool.resume()) << "round " << round;
    EXPECT_GT(pool.stats().staging_bytes, 0U);  // kept for the next pause
    EXPECT_TRUE(holds(live[1].p, live[1].n, 100 + round)) << "round " << round;
    fill(live[1].p, live[1].n, 2);
    expect_intact(live);
    check(pool);
  }
  EXPECT_EQ(pool.stats().pauses, 4U);
  release(pool, live);
  check(pool);
}

// 200 MiB of live blocks on a device of 384 MiB: an offload to pinned host memory would pin 200 MiB
// beside the 200 MiB it copies (the stand-in charges pinned memory to its capacity), and cannot;
// to a file it pins two slots of 64 MiB. With 256 MiB handles, one handle spans several slots.
TEST_F(vmm_pool_pause_file, AFileOffloadPinsTwoSlotsNotThePoolsSize)
{
  for (std::size_t handle : {16 * MiB, 256 * MiB}) {
    detail::host_runtime big{detail::host_runtime_options{.capacity_bytes = 384 * MiB}};
    vmm_pool pool{
        mr::vmm_pool_options{
            .reserve_bytes = 1024 * MiB, .handle_bytes = handle, .offload_directory = dir},
        big};
    std::vector<block> live;
    for (unsigned i = 0; i < 4; ++i) {
      live.push_back({pool.allocate(50 * MiB), 50 * MiB});
      fill(live.back().p, 50 * MiB, i + 1);
    }
    EXPECT_THROW(pool.pause(pause_mode::offload), out_of_memory) << handle;
    EXPECT_EQ(pool.state(), pause_state::active);
    ASSERT_TRUE(pool.pause(pause_mode::offload_to_file)) << handle;
    EXPECT_LE(pool.stats().staging_bytes, 128 * MiB);
    EXPECT_GE(pool.stats().offload_file_bytes, 200 * MiB);
    EXPECT_EQ(big.vmm_state().physical_bytes, 0U);
    ASSERT_TRUE(pool.resume()) << handle;
    expect_intact(big, live);
    pool.check_invariants();
    big.check_invariants();
    release(pool, live);
  }
}

TEST_F(vmm_pool_pause_file, AMissingDirectoryIsATypedErrorAndThePoolStaysActive)
{
  auto const missing = dir + "/no/such/directory";
  auto pool          = make({.offload_directory = missing});
  auto live          = populate(pool);
  auto const fds     = open_descriptors();
  try {
    (void)pool.pause(pause_mode::offload_to_file);
    FAIL() << "paused to a file in a missing directory";
  } catch (offload_file_error const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find(missing), std::string::npos) << what;
    EXPECT_NE(what.find("MiB"), std::string::npos) << what;  // the file's size
    EXPECT_EQ(e.code().value(), ENOENT) << what;
  }
  EXPECT_EQ(pool.state(), pause_state::active);
  EXPECT_EQ(pool.stats().staging_bytes, 0U);  // nothing pinned is left either
  EXPECT_EQ(pool.stats().offload_file_bytes, 0U);
  EXPECT_EQ(open_descriptors(), fds);
  expect_intact(live);
  check(pool);
  release(pool, populate(pool, {MiB}));          // serving still
  ASSERT_TRUE(pool.pause(pause_mode::offload));  // and pausable another way
  ASSERT_TRUE(pool.resume());
  expect_intact(live);
  release(pool, live);
  check(pool);
}

// A full disk, as a file-size limit (RLIMIT_FSIZE: the system refuses to make a file larger,
// EFBIG) lower than the pool: found when the file's space is reserved, before anything is given
// back (on a file system that cannot reserve space, by the first write: what was given back is
// put back). Either way the pool is active with its contents.
TEST_F(vmm_pool_pause_file, AFullDiskIsFoundBeforeAnythingIsGivenBack)
{
  auto pool = make();
  auto live = populate(pool);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto const previous = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small        = old;
  small.rlim_cur      = 4 * MiB;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  auto const unmaps = rt.calls().vmm_unmap;
  EXPECT_THROW(pool.pause(pause_mode::offload_to_file), offload_file_error);
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, previous);
  if (reserves_space(dir)) { EXPECT_EQ(rt.calls().vmm_unmap, unmaps); }  // else found writing
  EXPECT_EQ(pool.state(), pause_state::active);
  EXPECT_EQ(entries(dir), 0U);
  expect_intact(live);
  check(pool);
  ASSERT_TRUE(pool.pause(pause_mode::offload_to_file));  // room again
  ASSERT_TRUE(pool.resume());
  expect_intact(live);
  release(pool, live);
  check(pool);
}

// 200 MiB in 16 MiB handles: several chunks, so that a copy can fail after some were given back
// (they are then read back from the file).
TEST_F(vmm_pool_pause_file, AFailedCopyPutsBackWhatWasGivenBackFromTheFile)
{
  detail::host_runtime big{detail::host_runtime_options{.capacity_bytes = 1024 * MiB}};
  for (std::size_t skip : {0, 1, 3}) {
    vmm_pool pool{
        mr::vmm_pool_options{
            .reserve_bytes = 512 * MiB, .handle_bytes = 16 * MiB, .offload_directory = dir},
        big};
    std::vector<block> live;
    for (unsigned i = 0; i < 4; ++i) {
      live.push_back({pool.allocate(50 * MiB), 50 * MiB});
      fill(live.back().p, 50 * MiB, i + 1);
    }
    auto const fds     = open_descriptors();
    auto const creates = big.calls().vmm_create;
    big.fail_next_copies(1, skip);
    EXPECT_THROW(pool.pause(pause_mode::offload_to_file), cuda_error) << "skip " << skip;
    EXPECT_EQ(pool.state(), pause_state::active);
    if (skip > 1) { EXPECT_GT(big.calls().vmm_create, creates) << "nothing was given back"; }
    expect_intact(big, live);
    EXPECT_EQ(pool.stats().offload_file_bytes, 0U);
    EXPECT_EQ(open_descriptors(), fds);  // the file is closed
    pool.check_invariants();
    big.check_invariants();
    release(pool, live);
  }
}

TEST_F(vmm_pool_pause_file, AFailedResumeStaysPausedWithItsFileAndARetryWorks)
{
  auto pool         = make();
  auto live         = populate(pool);
  auto const mapped = pool.stats().mapped_bytes;
  ASSERT_TRUE(pool.pause(pause_mode::offload_to_file));
  auto const free_now = 128 * MiB - rt.used_bytes();
  void* other         = rt.allocate(detail::memory_kind::device, free_now - mapped / 2);
  EXPECT_THROW(pool.resume(), out_of_memory);  // another user holds the memory
  EXPECT_EQ(pool.state(), pause_state::paused_offloaded);
  EXPECT_EQ(pool.stats().offload_file_bytes, mapped);
  EXPECT_EQ(rt.vmm_state().physical_bytes, 0U);
  check(pool);
  rt.free(detail::memory_kind::device, other);
  rt.fail_next_maps(1);
  EXPECT_THROW(pool.resume(), cuda_error);
  rt.fail_next_copies(1, 1);  // a copy back from the pinned slots
  EXPECT_THROW(pool.resume(), cuda_error);
  rt.fail_next_allocations(1);  // no pinned slots
  EXPECT_THROW(pool.resume(), out_of_memory);
  EXPECT_EQ(pool.state(), pause_state::paused_offloaded);
  EXPECT_EQ(pool.stats().offload_file_bytes, mapped);
  check(pool);
  ASSERT_TRUE(pool.resume());
  expect_intact(live);
  EXPECT_EQ(pool.stats().offload_file_bytes, 0U);
  release(pool, live);
  check(pool);
}

TEST_F(vmm_pool_pause_file, DestroyedWhilePausedToAFileClosesItAndFreesEverything)
{
  auto const fds = open_descriptors();
  {
    auto pool = make();
    auto live = populate(pool);
    ASSERT_TRUE(pool.pause(pause_mode::offload_to_file));
    EXPECT_EQ(open_descriptors(), fds + 1);
  }
  EXPECT_EQ(open_descriptors(), fds);
  EXPECT_EQ(entries(dir), 0U);
  EXPECT_EQ(rt.vmm_state().reservations, 0U);
  EXPECT_EQ(rt.used_bytes(), 0U);  // the pinned slots too
  rt.check_invariants();
}

TEST_F(vmm_pool_pause_file, TheDefaultDirectoryIsTmpdir)
{
  auto const* old         = std::getenv("TMPDIR");
  std::string const saved = old != nullptr ? old : "";
  ::setenv("TMPDIR", (dir + "/missing").c_str(), 1);
  vmm_pool pool{mr::vmm_pool_options{.reserve_bytes = 64 * MiB, .handle_bytes = 4 * MiB}, rt};
  void* p = pool.allocate(MiB, a);
  try {
    (void)pool.pause(pause_mode::offload_to_file);
    ADD_FAILURE() << "TMPDIR was not used";
  } catch (offload_file_error const& e) {
    EXPECT_NE(std::string{e.what()}.find(dir + "/missing"), std::string::npos) << e.what();
  }
  ::setenv("TMPDIR", dir.c_str(), 1);
  EXPECT_TRUE(pool.pause(pause_mode::offload_to_file));
  EXPECT_TRUE(pool.resume());
  if (old != nullptr) {
    ::setenv("TMPDIR", saved.c_str(), 1);
  } else {
    ::unsetenv("TMPDIR");
  }
  pool.deallocate(p, MiB, a);
  check(pool);
}

// -- pause waiting for named streams ------------------------------------------------------------

TEST_F(vmm_pool_pause_file, PauseWithNamedStreamsWaitsForThoseAndNotForOthers)
{
  auto pool      = make();
  cudaStream_t b = rt.create_stream();
  cudaStream_t c = rt.create_stream();
  auto live      = populate(pool);
  rt.enqueue(a, 3);  // a kernel on the pool's memory
  rt.enqueue(b, 2);  // another that reads it
  rt.enqueue(c, 5);  // unrelated work (a trainer's)
  auto const visits              = rt.calls().synchronize_visits;
  cuda_stream_view const named[] = {a, b};
  ASSERT_TRUE(pool.pause(pause_mode::offload, named));
  EXPECT_EQ(rt.completed(a), rt.enqueued(a));
  EXPECT_EQ(rt.completed(b), rt.enqueued(b));
  EXPECT_EQ(rt.completed(c), 0U);                    // not waited for
  EXPECT_EQ(rt.calls().synchronize_visits, visits);  // no device-wide synchronization
  ASSERT_TRUE(pool.resume());  // (freeing its pinned memory synchronizes, as cudaFreeHost does)
  expect_intact(live);
  rt.enqueue(c);
  // The default still waits for the whole device.
  ASSERT_TRUE(pool.pause(pause_mode::discard));
  EXPECT_EQ(rt.completed(c), rt.enqueued(c));
  ASSERT_TRUE(pool.resume());
  release(pool, live);
  check(pool);
}

TEST_F(vmm_pool_pause_file, PauseWithNamedStreamsSynchronizesEachOnce)
{
  auto pool      = make();
  cudaStream_t b = rt.create_stream();
  void* p        = pool.allocate(5 * MiB, a);
  for (auto [streams, want] : {std::pair{std::vector<cuda_stream_view>{a, a, b, a}, 2U},
                               std::pair{std::vector<cuda_stream_view>{b}, 1U},
                               std::pair{std::vector<cuda_stream_view>{}, 0U}}) {
    rt.enqueue(a);
    auto const syncs = rt.calls().synchronize;
    ASSERT_TRUE(pool.pause(pause_mode::discard, streams));  // discard: no copy to wait for
    EXPECT_EQ(rt.calls().synchronize - syncs, want) << streams.size() << " streams named";
    ASSERT_TRUE(pool.resume());
    rt.complete_all();
  }
  pool.deallocate(p, 5 * MiB, a);
  check(pool);
}

TEST_F(vmm_pool_pause_file, PauseWithNamedStreamsTrimsTheirFreeBlocksAndPausesTheOthers)
{
  auto pool      = make();
  cudaStream_t b = rt.create_stream();
  void* on_a     = pool.allocate(12 * MiB, a);  // three whole handles each
  void* on_b     = pool.allocate(12 * MiB, b);
  auto live      = populate(pool);
  pool.deallocate(on_a, 12 * MiB, a);  // free on a's list
  pool.deallocate(on_b, 12 * MiB, b);  // free on b's list
  auto const before              = pool.stats().mapped_bytes;
  cuda_stream_view const named[] = {a};
  ASSERT_TRUE(pool.pause(pause_mode::offload_to_file, named));
  auto const paused = pool.stats().paused_bytes;
  EXPECT_LE(paused + 12 * MiB, before);    // a's free handles given back for good
  EXPECT_GE(paused, 12 * MiB + 24 * MiB);  // b's kept in the layout, with the live blocks
  ASSERT_TRUE(pool.resume());
  expect_intact(live);
  EXPECT_EQ(pool.stats().mapped_bytes, paused);
  release(pool, live);
  check(pool);
}

TEST_F(vmm_pool_pause_file, ANamedStreamThatFailsToSynchronizeLeavesThePoolActive)
{
  auto pool = make();
  auto live = populate(pool);
  rt.begin_global_capture(a);  // synchronizing is refused during a global capture
  cuda_stream_view const named[] = {a};
  EXPECT_THROW(pool.pause(pause_mode::discard, named), cuda_error);
  (void)rt.end_capture(a);
  EXPECT_EQ(pool.state(), pause_state::active);
  release(pool, populate(pool, {MiB}));  // serving
  expect_intact(live);
  release(pool, live);
  check(pool);
}

// -- regions ------------------------------------------------------------------------------------

TEST_F(vmm_pool_pause_file, RegionsPassFileOffloadAndNamedStreamsThrough)
{
  detail::host_runtime big{detail::host_runtime_options{.capacity_bytes = 256 * MiB}};
  cudaStream_t s      = big.create_stream();
  cudaStream_t t      = big.create_stream();
  auto o              = mr::vmm_region_resource::default_options();
  o.reserve_bytes     = 128 * MiB;
  o.offload_directory = dir;
  mr::vmm_region_resource res{o, big};
  std::vector<block> weights;
  {
    mr::region_scope scope{res, "weights"};
    weights.push_back({res.allocate(20 * MiB, s), 20 * MiB});
    fill(weights.back().p, 20 * MiB, 1);
  }
  void* kv = nullptr;
  {
    mr::region_scope scope{res, "kv_cache"};
    kv = res.allocate(8 * MiB, s);
  }
  big.enqueue(s);
  big.enqueue(t);
  cuda_stream_view const named[] = {s};
  ASSERT_TRUE(res.pause("weights", pause_mode::offload_to_file, named));
  EXPECT_EQ(big.completed(t), 0U);
  EXPECT_EQ(res.state("weights"), pause_state::paused_offloaded);
  EXPECT_EQ(res.stats("weights").offload_file_bytes, res.stats("weights").paused_bytes);
  EXPECT_EQ(res.state("kv_cache"), pause_state::active);
  EXPECT_EQ(res.pause_all(pause_mode::discard, named), 2U);  // kv_cache and "default"
  EXPECT_EQ(big.completed(t), 0U);
  EXPECT_EQ(res.resume_all(), 3U);
  expect_intact(big, weights);
  res.deallocate(weights[0].p, 20 * MiB, s);
  res.deallocate(kv, 8 * MiB, s);
  res.check_invariants();
}

}  // namespace
}  // namespace gpumem::test
