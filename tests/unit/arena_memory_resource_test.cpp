// White-box tests of arena_memory_resource over the host stand-in (simulated device memory).
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/arena_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace gpumem::test {
namespace {

using arena_mr            = mr::arena_memory_resource<mr::cuda_memory_resource>;
constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t KiB = std::size_t{1} << 10;

detail::host_runtime_options simulated(std::size_t capacity = std::size_t{1} << 30)
{
  detail::host_runtime_options o;
  o.backed         = false;
  o.capacity_bytes = capacity;
  return o;
}

class arena_test : public ::testing::Test {
 protected:
  void TearDown() override { mr_.check_invariants(); }
  std::uintptr_t addr(void* p) { return reinterpret_cast<std::uintptr_t>(p); }

  detail::host_runtime rt_{simulated()};
  mr::cuda_memory_resource up_{rt_};
  arena_mr mr_{&up_, 16 * MiB, false, rt_};
  cudaStream_t s1_{rt_.create_stream()};
  cudaStream_t s2_{rt_.create_stream()};
};

TEST(arena_construction, DefaultSizeIsHalfTheFreeMemoryAndBadArgumentsThrow)
{
  detail::host_runtime rt{simulated(64 * MiB)};
  mr::cuda_memory_resource up{rt};
  {
    arena_mr mr{&up, std::nullopt, false, rt};
    EXPECT_EQ(mr.arena_size(), 32 * MiB);
    EXPECT_EQ(rt.used_bytes(), 32 * MiB);  // taken from upstream once, up front
    EXPECT_TRUE(mr.supports_streams());
    EXPECT_FALSE(mr.supports_get_mem_info());
    EXPECT_TRUE(mr.get_upstream_resource() == device_async_resource_ref{up});
  }
  EXPECT_EQ(rt.used_bytes(), 0U);  // and returned on destruction
  EXPECT_THROW(arena_mr(nullptr, MiB, false, rt), gpumem::logic_error);
  EXPECT_THROW(arena_mr(&up, 100, false, rt), gpumem::logic_error);
  EXPECT_THROW(arena_mr(&up, 128 * MiB, false, rt), gpumem::out_of_memory);
  mr::arena_memory_resource by_ref{device_async_resource_ref{up}, 4 * MiB, false, rt};
  EXPECT_EQ(by_ref.arena_size(), 4 * MiB);
}

TEST_F(arena_test, PerThreadArenasForDefaultStreamsAndPerStreamArenasOtherwise)
{
  void* a = mr_.allocate(1000);  // legacy default stream, this thread
  void* b = mr_.allocate(1000, cuda_stream_per_thread);
  void* c = mr_.allocate(1000, s1_);
  void* d = mr_.allocate(1000, s2_);
  void* e = nullptr;
  std::thread{[&] { e = mr_.allocate(1000); }}.join();
  EXPECT_EQ(mr_.arenas().arena_count(), 5U);
  void* f = mr_.allocate(1000, cuda_stream_legacy);  // same stream as 0: same arena
  EXPECT_EQ(mr_.arenas().arena_count(), 5U);
  EXPECT_EQ(addr(f), addr(a) + 1024);  // next block of the same superblock
  // Each arena suballocates its own superblock.
  for (void* p : {b, c, d, e}) {
    EXPECT_GE(std::max(addr(p), addr(a)) - std::min(addr(p), addr(a)), MiB);
  }
  for (void* p : {a, b, f}) {
    mr_.deallocate(p, 1000, p == b ? cuda_stream_per_thread : cuda_stream_view{});
  }
  mr_.deallocate(c, 1000, s1_);
  mr_.deallocate(d, 1000, s2_);
  mr_.deallocate(e, 1000);  // another thread's arena: found on the slow path
  EXPECT_EQ(mr_.bad_deallocations(), 0U);
  // A later thread (its id may be the exited one's) never inherits an exited thread's arena.
  std::thread{[&] { mr_.deallocate(mr_.allocate(1000), 1000); }}.join();
  EXPECT_EQ(mr_.arenas().arena_count(), 6U);
}

TEST_F(arena_test, ReusesAtOnceOnTheSameStreamWithoutRuntimeCalls)
{
  void* p = mr_.allocate(1000, s1_);
  rt_.enqueue(s1_);  // s1 still uses p
  mr_.deallocate(p, 1000, s1_);
  auto const before = rt_.calls();
  for (int i = 0; i < 100; ++i) {
    void* q = mr_.allocate(1000, s1_);
    EXPECT_EQ(q, p);
    mr_.deallocate(q, 1000, s1_);
  }
  auto const after = rt_.calls();
  EXPECT_EQ(after.event_record, before.event_record);
  EXPECT_EQ(after.event_query, before.event_query);
  EXPECT_EQ(after.stream_wait_event, before.stream_wait_event);
  EXPECT_EQ(after.allocate, before.allocate);
}

TEST_F(arena_test, AddressOrderedFirstFitAndCoalescing)
{
  void* b[4];
  for (auto& p : b) { p = mr_.allocate(256 * KiB, s1_); }  // one full superblock
  for (int i = 1; i < 4; ++i) { EXPECT_EQ(addr(b[i]), addr(b[0]) + i * 256 * KiB); }
  mr_.deallocate(b[0], 256 * KiB, s1_);
  mr_.deallocate(b[2], 256 * KiB, s1_);
  void* x = mr_.allocate(100 * KiB, s1_);  // first fit in address order: b[0]'s place
  EXPECT_EQ(x, b[0]);
  mr_.deallocate(b[1], 256 * KiB, s1_);  // coalesces with b[2]'s free block (and x's tail)
  void* y = mr_.allocate(512 * KiB, s1_);
  EXPECT_EQ(addr(y), addr(x) + 100 * KiB);
  mr_.check_invariants();
  for (auto [p, n] : {std::pair{x, 100 * KiB}, {y, 512 * KiB}, {b[3], 256 * KiB}}) {
    mr_.deallocate(p, n, s1_);
  }
}

TEST_F(arena_test, LargeAllocationsComeStraightFromTheGlobalArena)
{
  auto const& global = mr_.arenas().global();
  void* p            = mr_.allocate(3 * MiB, s1_);
  EXPECT_EQ(global.lent_bytes(), 0U);
  EXPECT_EQ(global.free_bytes(), 13 * MiB);
  mr_.deallocate(p, 3 * MiB, s1_);
  EXPECT_EQ(global.free_bytes(), 16 * MiB);
}

TEST_F(arena_test, SurplusEmptySuperblocksGoBackToTheGlobalArena)
{
  auto const& global = mr_.arenas().global();
  void* a            = mr_.allocate(MiB, s1_);
  void* b            = mr_.allocate(MiB, s1_);
  EXPECT_EQ(global.lent_bytes(), 2 * MiB);
  mr_.deallocate(a, MiB, s1_);  // the arena keeps one empty superblock
  EXPECT_EQ(global.lent_bytes(), 2 * MiB);
  mr_.deallocate(b, MiB, s1_);  // a second one goes back
  EXPECT_EQ(global.lent_bytes(), MiB);
  mr_.defragment();  // after a device sync every empty superblock goes back
  EXPECT_EQ(global.lent_bytes(), 0U);
  EXPECT_EQ(global.free_bytes(), 16 * MiB);
}

TEST_F(arena_test, MemoryReleasedOnOneStreamReachesAnotherOnlyInOrder)
{
  void* a = mr_.allocate(3 * MiB, s1_);  // large: straight back to the global arena on free
  rt_.enqueue(s1_);                      // s1 still uses a
  mr_.deallocate(a, 3 * MiB, s1_);
  void* b = mr_.allocate(3 * MiB, s2_);
  ASSERT_EQ(b, a);
  rt_.enqueue(s2_);
  rt_.complete(s2_);
  EXPECT_LT(rt_.completed(s2_), rt_.enqueued(s2_)) << "s2 used the block before s1 was done";
  rt_.complete(s1_);
  rt_.complete(s2_);
  EXPECT_EQ(rt_.completed(s2_), rt_.enqueued(s2_));
  mr_.deallocate(b, 3 * MiB, s2_);
}

TEST_F(arena_test, SuperblocksReleasedBehindPendingWorkAreWaitedFor)
{
  void* a = mr_.allocate(MiB, s1_);
  void* b = mr_.allocate(MiB, s1_);
  rt_.enqueue(s1_);
  mr_.deallocate(a, MiB, s1_);
  mr_.deallocate(b, MiB, s1_);  // released to the global arena with s1's event
  auto const waits = rt_.calls().stream_wait_event;
  void* c          = mr_.allocate(1000, s2_);  // s2's arena takes b's superblock
  EXPECT_EQ(c, b);
  EXPECT_EQ(rt_.calls().stream_wait_event, waits + 1);
  rt_.enqueue(s2_);
  rt_.complete(s2_);
  EXPECT_LT(rt_.completed(s2_), rt_.enqueued(s2_));
  rt_.complete_all();
  void* d = mr_.allocate(MiB, s2_);  // the event has completed: forgotten, no wait
  EXPECT_EQ(rt_.calls().stream_wait_event, waits + 1);
  mr_.deallocate(c, 1000, s2_);
  mr_.deallocate(d, MiB, s2_);
}

TEST_F(arena_test, FreeOnAnotherStreamSynchronizesThatStreamFirst)
{
  void* p = mr_.allocate(1000, s1_);
  rt_.enqueue(s2_);
  mr_.deallocate(p, 1000, s2_);  // p belongs to s1's arena
  EXPECT_EQ(rt_.completed(s2_), rt_.enqueued(s2_));
  void* q = mr_.allocate(1000, s1_);
  EXPECT_EQ(q, p);
  mr_.deallocate(q, 1000, s1_);
  EXPECT_EQ(mr_.bad_deallocations(), 0U);
}

TEST(arena_out_of_memory, DefragmentsAndRetriesBeforeFailing)
{
  detail::host_runtime rt{simulated()};
  mr::cuda_memory_resource up{rt};
  arena_mr mr{&up, 4 * MiB, false, rt};
  auto s1 = rt.create_stream();
  auto s2 = rt.create_stream();
  void* p[4];
  for (auto& x : p) { x = mr.allocate(MiB, s1); }
  for (auto* x : p) { mr.deallocate(x, MiB, s1); }  // s1 keeps one empty superblock
  EXPECT_EQ(mr.arenas().global().free_bytes(), 3 * MiB);
  auto const syncs = rt.calls().synchronize;
  void* big        = mr.allocate(4 * MiB, s2);  // needs s1's empty superblock: defragment
  EXPECT_GT(rt.calls().synchronize, syncs);
  mr.deallocate(big, 4 * MiB, s2);
  mr.check_invariants();
}

TEST(arena_out_of_memory, ThrowsWithDiagnosisAndWritesTheDumpLog)
{
  detail::host_runtime rt{simulated()};
  mr::cuda_memory_resource up{rt};
  arena_mr mr{&up, 4 * MiB, true, rt};
  auto const path = std::filesystem::temp_directory_path() / "gpumem_arena_dump_test.log";
  std::filesystem::remove(path);
  mr.set_dump_log_path(path);
  EXPECT_EQ(mr.dump_log_path(), path);
  auto s1 = rt.create_stream();
  void* p = mr.allocate(1000, s1);
  try {
    (void)mr.allocate(4 * MiB, rt.create_stream());
    ADD_FAILURE() << "expected out_of_memory";
  } catch (gpumem::out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find("4194304"), std::string::npos) << what;
    EXPECT_NE(what.find("fragmentation"), std::string::npos) << what;
    EXPECT_NE(what.find(path.string()), std::string::npos) << what;
  }
  std::ifstream file{path};
  std::stringstream text;
  text << file.rdbuf();
  for (char const* needle : {"out of memory allocating", "4194304", "global arena",
                             "per-stream arena", "superblock", "free range"}) {
    EXPECT_NE(text.str().find(needle), std::string::npos) << needle << " missing in\n"
                                                          << text.str();
  }
  void* q = mr.allocate(2 * MiB, s1);  // still usable
  mr.deallocate(q, 2 * MiB, s1);
  mr.deallocate(p, 1000, s1);
  mr.check_invariants();
  std::filesystem::remove(path);
}

TEST_F(arena_test, BadFreesAreReportedCountedAndNeverApplied)
{
  ::testing::internal::CaptureStderr();
  void* p = mr_.allocate(1000, s1_);
  mr_.deallocate(p, 1000, s1_);
  mr_.deallocate(p, 1000, s1_);  // double free
  EXPECT_EQ(mr_.bad_deallocations(), 1U);
  int local{};
  mr_.deallocate(&local, 1000, s1_);  // not ours
  EXPECT_EQ(mr_.bad_deallocations(), 2U);
  void* q = mr_.allocate(1000, s1_);
  mr_.deallocate(q, 5000, s1_);  // wrong size: the block is freed with its own size
  EXPECT_EQ(mr_.bad_deallocations(), 3U);
  void* big = mr_.allocate(3 * MiB, s1_);
  mr_.deallocate(big, 3 * MiB, s1_);
  mr_.deallocate(big, 3 * MiB, s1_);  // large double free
  EXPECT_EQ(mr_.bad_deallocations(), 4U);
  auto const text = ::testing::internal::GetCapturedStderr();
  for (char const* needle : {"double free", "unknown pointer", "wrong size"}) {
    EXPECT_NE(text.find(needle), std::string::npos) << needle << " missing in " << text;
  }
  mr_.check_invariants();
  void* r = mr_.allocate(1000, s1_);  // the state is intact
  EXPECT_EQ(r, q);
  mr_.deallocate(r, 1000, s1_);
  EXPECT_EQ(mr_.arenas().global().free_bytes() + mr_.arenas().global().lent_bytes(), 16 * MiB);
}

TEST_F(arena_test, DumpMemoryLogIsReadable)
{
  void* p = mr_.allocate(1000, s1_);
  std::ostringstream out;
  mr_.dump_memory_log(out);
  EXPECT_NE(out.str().find("global arena"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("1 arenas"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("live 1 blocks"), std::string::npos) << out.str();
  mr_.deallocate(p, 1000, s1_);
}

}  // namespace
}  // namespace gpumem::test
