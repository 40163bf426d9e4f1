// vmm_registrar over the host stand-in: registrations follow a vmm_pool's mappings through growth,
// moves of free memory, trims, pause and resume — after every step the registered bytes are
// exactly the mapped bytes (and, per handle, each registration is one whole handle).
#include "suballocator_test_helpers.hpp"

#include <support/repeated_job.hpp>

#include <gpumem/mr/vmm_pool_memory_resource.hpp>
#include <gpumem/mr/vmm_registrar.hpp>

#include <map>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

namespace gpumem::test {
namespace {

using vmm_pool = mr::vmm_pool_memory_resource;
using unit     = mr::vmm_registration_unit;
using ranges   = std::vector<std::pair<char*, std::size_t>>;

/// Adjacent ranges joined, in address order.
ranges coalesced(ranges r)
{
  std::sort(r.begin(), r.end());
  ranges out;
  for (auto const& [p, n] : r) {
    if (!out.empty() && out.back().first + out.back().second == p) {
      out.back().second += n;
    } else {
      out.emplace_back(p, n);
    }
  }
  return out;
}

/// A fake registration service: tokens are numbers; it knows what is registered.
struct fake_service {
  std::map<char*, std::size_t> live;  // what is registered now
  std::map<void*, char*> by_token;
  std::uintptr_t next{1};
  int fail_registers{};  // the next n registrations throw

  mr::vmm_registrar::register_fn reg()
  {
    return [this](void* p, std::size_t n) -> void* {
      if (fail_registers > 0) {
        --fail_registers;
        throw std::runtime_error("refused");
      }
      auto* at = static_cast<char*>(p);
      EXPECT_EQ(live.count(at), 0U) << "registered twice at " << p;
      live[at]        = n;
      void* token     = reinterpret_cast<void*>(next++);
      by_token[token] = at;
      return token;
    };
  }
  mr::vmm_registrar::deregister_fn dereg()
  {
    return [this](void* token) {
      auto const it = by_token.find(token);
      ASSERT_NE(it, by_token.end()) << "deregistered an unknown token";
      live.erase(it->second);
      by_token.erase(it);
    };
  }
  [[nodiscard]] ranges registered() const { return {live.begin(), live.end()}; }
};

struct vmm_registrar_test : ::testing::TestWithParam<unit> {
  detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = 1024 * MiB}};
  fake_service nccl;

  static vmm_pool make(detail::host_runtime& rt)
  {
    return vmm_pool{{.reserve_bytes = 2048 * MiB, .handle_bytes = 4 * MiB}, rt};
  }

  /// The invariant: registered == mapped (as sets of bytes), the registrar's view is the
  /// service's, and per handle each registration is one whole handle.
  void check(vmm_pool& pool, mr::vmm_registrar const& reg)
  {
    ranges mapped;
    for (auto const& run : pool.mapped_runs()) {
      mapped.emplace_back(static_cast<char*>(run.ptr), run.bytes);
    }
    EXPECT_EQ(coalesced(nccl.registered()), coalesced(mapped));
    ranges seen;
    for (auto const& r : reg.registrations()) {
      seen.emplace_back(static_cast<char*>(r.ptr), r.bytes);
    }
    EXPECT_EQ(seen, nccl.registered());
    if (reg.unit() == unit::handle) {
      for (auto const& [p, n] : nccl.registered()) {
        auto const h = rt.vmm_allocation_at(p);
        EXPECT_EQ(h.base, p);
        EXPECT_EQ(h.bytes, n);
      }
    }
    EXPECT_EQ(reg.failures(), 0U) << reg.last_failure();
    pool.check_invariants();
  }
};

TEST_P(vmm_registrar_test, RegistersWhatIsMappedThenFollowsGrowthAndTrim)
{
  auto pool   = make(rt);
  void* early = pool.allocate(9 * MiB);  // mapped before the registrar exists
  mr::vmm_registrar reg{pool, nccl.reg(), nccl.dereg(), GetParam()};
  EXPECT_FALSE(nccl.live.empty());
  check(pool, reg);
  void* grown = pool.allocate(21 * MiB);  // growth: registered after the map
  check(pool, reg);
  pool.deallocate(grown, 21 * MiB);
  EXPECT_GT(pool.trim_to(10 * MiB), 0U);  // trim: deregistered
  check(pool, reg);
  pool.deallocate(early, 9 * MiB);
  pool.trim();
  EXPECT_TRUE(nccl.live.empty());
  check(pool, reg);
}

TEST_P(vmm_registrar_test, FollowsMemoryMovedOutOfAHole)
{
  auto pool = make(rt);
  mr::vmm_registrar reg{pool, nccl.reg(), nccl.dereg(), GetParam()};
  void* a = pool.allocate(8 * MiB);
  void* b = pool.allocate(16 * MiB);
  void* c = pool.allocate(8 * MiB);
  pool.deallocate(b, 16 * MiB);  // a hole of handles that can move
  auto const created = rt.calls().vmm_create;
  void* d            = pool.allocate(30 * MiB);  // larger than any hole: the hole's handles move
  EXPECT_LT(rt.calls().vmm_create - created, 30 * MiB / (4 * MiB)) << "no handle was moved";
  check(pool, reg);
  for (auto [p, n] : {std::pair{a, 8 * MiB}, {c, 8 * MiB}, {d, 30 * MiB}}) {
    pool.deallocate(p, n);
  }
  check(pool, reg);
}

// A job run again and again: when the pool is wholly free its next allocation moves the handles
// that growths moved back home (vmm_pool_home_test); the registrations follow each move.
TEST_P(vmm_registrar_test, FollowsTheHandlesGoingHome)
{
  auto pool = make(rt);
  mr::vmm_registrar reg{pool, nccl.reg(), nccl.dereg(), GetParam()};
  auto const job = test::make_repeated_job(19, 300);
  for (int run = 0; run < 3; ++run) {
    (void)test::run_job(job, pool, {});
    check(pool, reg);
  }
  void* p = pool.allocate(MiB);  // the layout goes home first
  EXPECT_GE(pool.stats().home_returns, 1U);
  check(pool, reg);
  pool.deallocate(p, MiB);
}

TEST_P(vmm_registrar_test, PauseDeregistersBeforeTheUnmapAndResumeRegistersAgain)
{
  auto pool = make(rt);
  void* p   = pool.allocate(13 * MiB);
  // At the pause, every registered range is still mapped when it is deregistered.
  bool all_mapped_at_deregister = true;
  mr::vmm_registrar reg{pool, nccl.reg(),
                        [&](void* token) {
                          auto* at = nccl.by_token.at(token);
                          try {
                            rt.vmm_check_mapped(at, nccl.live.at(at));
                          } catch (cuda_error const&) {
                            all_mapped_at_deregister = false;
                          }
                          nccl.dereg()(token);
                        },
                        GetParam()};
  ASSERT_TRUE(pool.pause(pause_mode::offload));
  EXPECT_TRUE(nccl.live.empty());
  EXPECT_TRUE(all_mapped_at_deregister);
  check(pool, reg);
  ASSERT_TRUE(pool.resume());
  EXPECT_FALSE(nccl.live.empty());
  check(pool, reg);
  pool.deallocate(p, 13 * MiB);
}

TEST_P(vmm_registrar_test, RandomSequencesKeepRegisteredEqualToMapped)
{
  std::mt19937 rng{7};
  for (int round = 0; round < 3; ++round) {
    auto pool = make(rt);
    mr::vmm_registrar reg{pool, nccl.reg(), nccl.dereg(), GetParam()};
    std::vector<std::pair<void*, std::size_t>> live;
    for (int step = 0; step < 80; ++step) {
      auto const what = rng() % 16;
      if (what < 8 || live.empty()) {
        std::size_t const n = (1 + rng() % 24) * MiB / (1 + rng() % 3);
        try {
          live.emplace_back(pool.allocate(n), n);
        } catch (out_of_memory const&) {  // free memory given back first: still followed
        }
      } else if (what < 13) {
        auto const i = rng() % live.size();
        pool.deallocate(live[i].first, live[i].second);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      } else if (what < 15) {
        (void)pool.trim_to((rng() % 64) * MiB);
      } else {
        ASSERT_TRUE(pool.pause(rng() % 2 == 0 ? pause_mode::offload : pause_mode::discard));
        check(pool, reg);
        ASSERT_TRUE(pool.resume());
      }
      check(pool, reg);
      if (HasFailure()) { FAIL() << "round " << round << " step " << step; }
    }
    for (auto const& [p, n] : live) { pool.deallocate(p, n); }
  }
  rt.check_invariants();
}

TEST_P(vmm_registrar_test, CloseDeregistersEverythingAndStopsFollowing)
{
  auto pool = make(rt);
  void* p   = pool.allocate(10 * MiB);
  {
    mr::vmm_registrar reg{pool, nccl.reg(), nccl.dereg(), GetParam()};
    EXPECT_FALSE(nccl.live.empty());
    reg.close();
    EXPECT_TRUE(reg.closed());
    EXPECT_TRUE(nccl.live.empty());
    void* q = pool.allocate(20 * MiB);  // no longer followed
    EXPECT_TRUE(nccl.live.empty());
    pool.deallocate(q, 20 * MiB);
    reg.close();  // idempotent
  }
  mr::vmm_registrar again{pool, nccl.reg(), nccl.dereg(), GetParam()};
  EXPECT_FALSE(nccl.live.empty());
  pool.deallocate(p, 10 * MiB);
}

TEST_P(vmm_registrar_test, DestructorDeregisters)
{
  auto pool = make(rt);
  void* p   = pool.allocate(10 * MiB);
  {
    mr::vmm_registrar reg{pool, nccl.reg(), nccl.dereg(), GetParam()};
    EXPECT_FALSE(nccl.live.empty());
  }
  EXPECT_TRUE(nccl.live.empty());
  pool.deallocate(p, 10 * MiB);
}

TEST_P(vmm_registrar_test, FailingCallablesAreCountedNeverThrownThroughThePool)
{
  auto pool = make(rt);
  mr::vmm_registrar reg{pool, nccl.reg(), nccl.dereg(), GetParam()};
  nccl.fail_registers = 1000;
  void* p             = pool.allocate(12 * MiB);  // the growth's registrations all fail
  EXPECT_GT(reg.failures(), 0U);
  EXPECT_NE(reg.last_failure().find("refused"), std::string::npos) << reg.last_failure();
  EXPECT_TRUE(reg.registrations().empty());
  nccl.fail_registers = 0;
  void* q             = pool.allocate(12 * MiB);  // the pool goes on; new memory registers
  EXPECT_FALSE(reg.registrations().empty());
  pool.deallocate(p, 12 * MiB);
  pool.deallocate(q, 12 * MiB);
  pool.trim();
  EXPECT_TRUE(nccl.live.empty());
  pool.check_invariants();
  EXPECT_THROW((mr::vmm_registrar{pool, nullptr, nccl.dereg()}), logic_error);
}

INSTANTIATE_TEST_SUITE_P(units, vmm_registrar_test, ::testing::Values(unit::handle, unit::run),
                         [](auto const& info) {
                           return info.param == unit::handle ? "per_handle" : "per_run";
                         });

TEST(vmm_registrar, PerHandleMakesOneRegistrationPerHandlePerRunFewer)
{
  detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = 128 * MiB}};
  std::size_t counts[2]{};
  for (auto u : {unit::handle, unit::run}) {
    vmm_pool pool{{.reserve_bytes = 256 * MiB, .handle_bytes = 4 * MiB}, rt};
    fake_service svc;
    mr::vmm_registrar reg{pool, svc.reg(), svc.dereg(), u};
    void* p                           = pool.allocate(16 * MiB);  // one growth, 4 handles
    counts[u == unit::handle ? 0 : 1] = svc.live.size();
    pool.deallocate(p, 16 * MiB);
  }
  EXPECT_EQ(counts[0], 4U);
  EXPECT_EQ(counts[1], 1U);
}

}  // namespace
}  // namespace gpumem::test
