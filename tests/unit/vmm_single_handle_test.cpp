// Single-handle allocations of vmm_pool_memory_resource over the host stand-in: one physical handle
// mapped once, shareable; the stream-ordered free; export and import; bad input; failures unwound.
#include "suballocator_test_helpers.hpp"

#include <gpumem/mr/vmm_pool_memory_resource.hpp>
#include <gpumem/ipc/vmm_ipc.hpp>

#include <cstring>

namespace gpumem::test {
namespace {

using vmm_pool = mr::vmm_pool_memory_resource;

struct vmm_single_handle : ::testing::Test {
  detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = 64 * MiB}};
  cudaStream_t a = rt.create_stream();
  vmm_pool pool{mr::vmm_pool_options{.reserve_bytes = 256 * MiB}, rt};

  void check()
  {
    pool.check_invariants();
    rt.check_invariants();
    EXPECT_EQ(rt.vmm_state().misuse_count, 0U);
  }
};

TEST_F(vmm_single_handle, IsOneShareableHandleMappedOnceOutsideThePool)
{
  void* pooled      = pool.allocate(MiB, a);
  auto const before = rt.vmm_state();
  void* p           = pool.allocate_single_handle(3 * MiB, a);
  auto const after  = rt.vmm_state();
  EXPECT_EQ(after.handles, before.handles + 1);
  EXPECT_EQ(after.mappings, before.mappings + 1);
  EXPECT_EQ(after.reservations, before.reservations + 1) << "an address range of its own";
  EXPECT_EQ(after.physical_bytes, before.physical_bytes + 4 * MiB) << "rounded to the granule";
  rt.vmm_check_mapped(p, 4 * MiB);
  std::memset(p, 0x5a, 3 * MiB);  // backed: real memory
  auto const s = pool.stats();
  EXPECT_EQ(s.single_handle_allocations, 1U);
  EXPECT_EQ(s.single_handle_bytes, 4 * MiB);
  EXPECT_EQ(s.mapped_bytes, pool.pool_size()) << "not the pool's memory";
  auto e = pool.export_single_handle(p);
  EXPECT_TRUE(e.fd.valid());
  EXPECT_EQ(e.bytes, 4 * MiB);
  EXPECT_EQ(e.device, 0);
  check();
  pool.deallocate(p, 3 * MiB, a);
  pool.deallocate(pooled, MiB, a);
  EXPECT_EQ(pool.trim_to(0), 6 * MiB);
  EXPECT_EQ(rt.vmm_state().physical_bytes, pool.stats().spare_bytes);  // no single handle left
  EXPECT_EQ(pool.bad_deallocations(), 0U);
  check();
}

TEST_F(vmm_single_handle, ItsMemoryIsReleasedOnlyOnceTheStreamPassedTheFree)
{
  void* p = pool.allocate_single_handle(2 * MiB, a);
  rt.enqueue(a);  // work on `a` still uses p when it is freed
  pool.deallocate(p, 2 * MiB, a);
  EXPECT_EQ(rt.vmm_state().physical_bytes, 2 * MiB);
  void* q = pool.allocate_single_handle(2 * MiB, a);  // releases what passed: nothing yet
  EXPECT_EQ(rt.vmm_state().physical_bytes, 4 * MiB);
  rt.vmm_check_mapped(p, 2 * MiB);
  EXPECT_EQ(pool.stats().single_handle_allocations, 2U) << "one live, one waiting";
  rt.complete(a);
  pool.deallocate(q, 2 * MiB, a);  // `a` has no pending work: q may go at the next call
  void* r = pool.allocate_single_handle(2 * MiB, a);
  EXPECT_EQ(rt.vmm_state().physical_bytes, 2 * MiB) << "p and q released, r created";
  check();
  pool.deallocate(r, 2 * MiB, a);
}

TEST_F(vmm_single_handle, TheDestructorReleasesWaitingAndLiveAllocations)
{
  {
    vmm_pool local{mr::vmm_pool_options{.reserve_bytes = 64 * MiB}, rt};
    void* p = local.allocate_single_handle(MiB, a);
    (void)local.allocate_single_handle(MiB, a);  // never freed
    rt.enqueue(a);
    local.deallocate(p, MiB, a);
  }
  EXPECT_EQ(rt.completed(a), rt.enqueued(a)) << "released only after the stream finished";
  EXPECT_EQ(rt.vmm_state().physical_bytes, 0U);
  EXPECT_EQ(rt.vmm_state().handles, 0U);
  rt.check_invariants();
}

TEST_F(vmm_single_handle, AnExportImportsAsTheSamePhysicalMemory)
{
  void* p = pool.allocate_single_handle(5 * MiB, a);
  auto e  = pool.export_single_handle(p);
  {
    imported_vmm_memory m{e.fd.get(), e.bytes, -1, rt};
    EXPECT_NE(m.get(), nullptr);
    EXPECT_NE(m.get(), p) << "mapped at an address of the importer's";
    EXPECT_EQ(m.size(), 6 * MiB);
    rt.vmm_check_mapped(m.get(), m.size());
    EXPECT_EQ(rt.vmm_state().physical_bytes, 6 * MiB) << "no new physical memory";
    pool.deallocate(p, 5 * MiB, a);  // the exporter is done first: the memory stays mapped here
    EXPECT_EQ(pool.trim_to(0), 6 * MiB);
    EXPECT_EQ(rt.vmm_state().physical_bytes, 6 * MiB);
    imported_vmm_memory moved{std::move(m)};
    EXPECT_EQ(m.get(), nullptr);
    rt.vmm_check_mapped(moved.get(), moved.size());
    rt.check_invariants();
  }
  EXPECT_EQ(rt.vmm_state().physical_bytes, 0U) << "freed with its last mapping";
  check();
}

TEST_F(vmm_single_handle, BadInputGetsTypedErrorsAndChangesNothing)
{
  EXPECT_THROW((void)pool.allocate_single_handle(0, a), logic_error);
  EXPECT_THROW((void)pool.allocate_single_handle(128 * MiB, a), out_of_memory);  // > capacity
  void* pooled = pool.allocate(MiB, a);
  try {
    (void)pool.export_single_handle(pooled);
    ADD_FAILURE() << "exported a pooled allocation";
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("allocate_single_handle"), std::string::npos) << e.what();
  }
  void* p = pool.allocate_single_handle(MiB, a);
  auto e  = pool.export_single_handle(p);
  EXPECT_THROW((imported_vmm_memory{e.fd.get(), 3 * MiB, -1, rt}), logic_error);  // not granular
  EXPECT_THROW((imported_vmm_memory{e.fd.get(), 4 * MiB, -1, rt}), cuda_error);   // wrong size
  EXPECT_THROW((imported_vmm_memory{-1, 2 * MiB, -1, rt}), cuda_error);           // not an export
  EXPECT_EQ(rt.vmm_state().handles, 2U) << "failed imports leave no handle behind";
  pool.deallocate(p, 3 * MiB, a);  // wrong size: reported, freed all the same
  EXPECT_EQ(pool.bad_deallocations(), 1U);
  pool.deallocate(p, MiB, a);  // double free: reported by the pool
  EXPECT_EQ(pool.bad_deallocations(), 2U);
  pool.deallocate(pooled, MiB, a);
  (void)pool.trim_to(0);
  EXPECT_EQ(rt.vmm_state().physical_bytes, pool.stats().spare_bytes);  // no single handle left
  check();
}

TEST_F(vmm_single_handle, FailedDriverCallsAreUnwound)
{
  rt.fail_next_maps(1);
  EXPECT_THROW((void)pool.allocate_single_handle(2 * MiB, a), cuda_error);
  EXPECT_EQ(rt.vmm_state().handles, 0U);
  EXPECT_EQ(rt.vmm_state().reservations, 1U) << "only the pool's range is left";
  rt.fail_next_allocations(2);  // the create and its retry after trimming
  EXPECT_THROW((void)pool.allocate_single_handle(2 * MiB, a), out_of_memory);
  EXPECT_EQ(rt.vmm_state().reservations, 1U);
  check();
  void* p = pool.allocate_single_handle(2 * MiB, a);  // usable
  pool.deallocate(p, 2 * MiB, a);
}

TEST_F(vmm_single_handle, OutOfMemoryReleasesThePoolsFreeMemoryAndRetries)
{
  void* big = pool.allocate(48 * MiB, a);
  pool.deallocate(big, 48 * MiB, a);  // 48 of 64 MiB mapped and free in the pool
  void* p = pool.allocate_single_handle(40 * MiB, a);
  EXPECT_LE(pool.stats().mapped_bytes, 24 * MiB);
  rt.vmm_check_mapped(p, 40 * MiB);
  check();
  pool.deallocate(p, 40 * MiB, a);
}

TEST_F(vmm_single_handle, PoolAllocationsAndFreesAreUnaffected)
{
  void* s = pool.allocate_single_handle(2 * MiB, a);
  void* p = pool.allocate(3 * MiB, a);
  EXPECT_FALSE(p == s);
  pool.deallocate(p, 3 * MiB, a);
  pool.deallocate(reinterpret_cast<void*>(0x1000), 256, a);  // foreign: reported, nothing else
  EXPECT_EQ(pool.bad_deallocations(), 1U);
  rt.vmm_check_mapped(s, 2 * MiB);
  pool.deallocate(s, 2 * MiB, a);
  check();
}

}  // namespace
}  // namespace gpumem::test
