// Names and header paths that moved keep working: the memory-pool types live in gpumem::pools and
// are the same entities under their earlier gpumem:: names, and each deprecated header path (only
// those are included here) still provides what its new path does.
#include <gpumem/pool/fd_passing.hpp>
#include <gpumem/pool/memory_pool.hpp>
#include <gpumem/pool/owned_fd.hpp>
#include <gpumem/pool/pool_attributes.hpp>
#include <gpumem/pool/vmm_ipc.hpp>
#include <gpumem/simulated_device.hpp>
#include <gpumem/trace/metered_runtime.hpp>
#include <gpumem/trace/replay.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <string>
#include <type_traits>

namespace {

using std::is_same_v;

static_assert(is_same_v<gpumem::memory_pool, gpumem::pools::memory_pool>);
static_assert(is_same_v<gpumem::memory_pool_ref, gpumem::pools::memory_pool_ref>);
static_assert(is_same_v<gpumem::pool_properties, gpumem::pools::pool_properties>);
static_assert(is_same_v<gpumem::pool_location, gpumem::pools::pool_location>);
static_assert(is_same_v<gpumem::location_kind, gpumem::pools::location_kind>);
static_assert(is_same_v<gpumem::allocation_handle_type, gpumem::pools::allocation_handle_type>);
static_assert(is_same_v<gpumem::handle_type_set, gpumem::pools::handle_type_set>);
static_assert(
    is_same_v<gpumem::pool_attr::release_threshold, gpumem::pools::pool_attr::release_threshold>);
static_assert(is_same_v<gpumem::pool_usage_statistics, gpumem::pools::pool_usage_statistics>);
static_assert(gpumem::pool_attribute<gpumem::pools::pool_attr::used_mem_high>);
static_assert(gpumem::pools::pool_attribute<gpumem::pool_attr::used_mem_high>);

constexpr std::size_t MiB = std::size_t{1} << 20;

// Takes the earlier spelling; called with the new one.
std::size_t reserved_through_old_name(gpumem::memory_pool_ref pool)
{
  return pool.usage_statistics().reserved_bytes;
}

TEST(MovedNames, MemoryPoolWorksUnderBothSpellings)
{
  gpumem::simulated_device sim{{.capacity_bytes = 64 * MiB, .backed = false}};
  gpumem::pools::pool_properties props{};
  gpumem::validate(props);  // the earlier name of the same function
  EXPECT_EQ(gpumem::pools::find_broken_rule(props), gpumem::find_broken_rule(props));
  gpumem::pools::memory_pool pool{props, sim};
  gpumem::memory_pool& same = pool;
  auto const stream         = sim.create_stream();
  void* p                   = same.allocate(MiB, stream);
  EXPECT_GT(reserved_through_old_name(pool), 0U);
  same.set<gpumem::pool_attr::release_threshold>(4 * MiB);
  EXPECT_EQ(pool.get<gpumem::pools::pool_attr::release_threshold>(), 4 * MiB);
  pool.deallocate(p, stream);
  sim.complete_all();
}

TEST(MovedNames, DeprecatedHeaderPathsProvideTheMovedHeaders)
{
  gpumem::simulated_device sim{{.capacity_bytes = 64 * MiB, .backed = false}};
  gpumem::trace::metered_runtime meter{sim};  // <gpumem/trace/metered_runtime.hpp>
  void* p = meter.allocate(gpumem::memory_kind::device, MiB);
  EXPECT_EQ(meter.held_bytes(), MiB);
  meter.free(gpumem::memory_kind::device, p);
  EXPECT_EQ(meter.held_bytes(), 0U);

  gpumem::trace::replay_options const options{};  // <gpumem/trace/replay.hpp>
  (void)options;
  static_assert(std::is_move_constructible_v<gpumem::imported_vmm_memory>);  // <pool/vmm_ipc.hpp>

  int fds[2]{};
  ASSERT_EQ(::pipe(fds), 0);
  gpumem::owned_fd const read_end{fds[0]};  // <gpumem/pool/owned_fd.hpp>
  {
    gpumem::owned_fd const write_end{fds[1]};
  }
  EXPECT_EQ(::fcntl(fds[1], F_GETFD), -1) << "the owned descriptor was closed";
  (void)&gpumem::send_with_fd;  // <gpumem/pool/fd_passing.hpp>
}

}  // namespace
