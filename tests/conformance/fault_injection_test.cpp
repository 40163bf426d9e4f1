// The fault-injection suite: every stack of the conformance list over the host stand-in, with one
// runtime call failing at a time (tests/support/fault_injecting_runtime.hpp).
//
// A call site is (kind, n): the n-th call of a kind during a fixed, deterministic workload (the
// stack's construction, 80 random allocations and frees on three streams with work held on them,
// freeing what is left, a few more allocations, destruction). The workload runs once unarmed to
// count the calls of each kind; then, for every kind it reaches and every n (a spread sample of 64
// where there are more), once more with that call failing. Each run checks:
//   * the operation that reached the failure throws a gpumem exception (bad_alloc, out_of_memory
//     or cuda_error) whose message names the failed CUDA call — or swallows the failure (an event
//     query taken as "not done", a free that cannot report);
//   * no other operation fails (the one that failed is retried and must succeed);
//   * the resource's invariants (where it has check_invariants) and the runtime's hold;
//   * after destruction the runtime holds nothing: no allocation, physical handle, mapping,
//     reservation or event (beyond what a refused free, unmap, release or unreserve kept, which
//     the runtime then gives back).
#include <conformance/resources.hpp>
#include <gpumem/ipc/vmm_ipc.hpp>
#include <support/fault_injecting_runtime.hpp>

#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>

#include <cstdint>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem::test {
namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

/// The host stand-in (simulated addresses: the same workload lays memory out the same way every
/// run, so call counts repeat) behind a fault-injecting runtime. Test controls go to the host.
class fault_backend final : public backend {
 public:
  fault_backend() : host_{options()}, faults_{host_} {}
  char const* name() const override { return "host"; }
  detail::runtime& runtime() override { return faults_; }
  bool host_accessible() const override { return false; }
  cudaStream_t create_stream() override { return host_.create_stream(); }
  void hold(cudaStream_t stream) override { host_.enqueue(stream); }
  void release(cudaStream_t stream) override { host_.complete(stream); }
  bool ordered_after_held(cudaStream_t, cudaStream_t) override { return true; }
  void synchronize() override { host_.complete_all(); }

  detail::host_runtime& host() { return host_; }
  fault_injecting_runtime& faults() { return faults_; }

 private:
  static detail::host_runtime_options options()
  {
    detail::host_runtime_options o;
    o.backed       = false;
    o.device_count = 2;  // a peer for the virtual-memory pool's access grants
    return o;
  }
  detail::host_runtime host_;
  fault_injecting_runtime faults_;
};

struct site {
  fault_kind kind{};
  std::uint64_t n{};
};

std::string describe(std::optional<site> const& s)
{
  return s ? detail::format(to_string(s->kind), " #", s->n) : std::string{"unarmed"};
}

/// Runs the invariant checks of the top resource where its type has them. Every free of the
/// workload is good: a resource counting a bad one dropped a block after a runtime failure.
template <class... Rs>
void check_top(mr::device_memory_resource& top)
{
  auto one = [&]<class R>(R*) {
    auto* r = dynamic_cast<R*>(&top);
    if (r == nullptr) { return; }
    r->check_invariants();
    if constexpr (requires { r->bad_deallocations(); }) {
      if (r->bad_deallocations() != 0) {
        throw std::logic_error{detail::format(r->bad_deallocations(),
                                              " good deallocation(s) counted as bad (dropped)")};
      }
    }
  };
  (one(static_cast<Rs*>(nullptr)), ...);
}

void check_resource(mr::device_memory_resource& top)
{
  using pool_mr  = mr::pool_memory_resource<mr::cuda_memory_resource>;
  using arena_mr = mr::arena_memory_resource<mr::cuda_memory_resource>;
  using vmm_mr   = mr::vmm_pool_memory_resource;
  check_top<pool_mr, vmm_mr, arena_mr, mr::fixed_size_memory_resource<mr::cuda_memory_resource>,
            mr::binning_memory_resource<mr::cuda_memory_resource>, mr::caching_memory_resource,
            mr::thread_cache_resource_adaptor<pool_mr>, mr::thread_cache_resource_adaptor<arena_mr>,
            mr::thread_cache_resource_adaptor<vmm_mr>, mr::statistics_resource_adaptor<pool_mr>,
            mr::limiting_resource_adaptor<pool_mr>, mr::tracking_resource_adaptor<pool_mr>>(top);
}

/// What one run of the workload saw.
struct run_result {
  fault_counts counts{};
  bool fired{};
  bool reported{};  ///< an operation threw the injected failure
  std::vector<std::string> problems;
};

/// The deterministic workload (see the top of this file), armed at `armed` (or not).
class workload {
 public:
  explicit workload(std::optional<site> armed) : armed_{armed} {}

  template <class Maker>
  run_result run()
  {
    cudaStream_t const streams[] = {nullptr, be_.create_stream(), be_.create_stream()};
    if (armed_) { be_.faults().arm(armed_->kind, armed_->n); }
    construct<Maker>();
    if (mr_) {
      random_operations(streams);
      be_.synchronize();
      check("after the random operations");
      while (!live_.empty()) { free_one(0); }
      for (std::size_t n : {std::size_t{512}, 5 * mib}) {  // still usable
        void* p = allocate(n, streams[1]);
        if (p != nullptr) { mr_->deallocate_async(p, n, streams[1]); }
      }
      check("after freeing everything");
    }
    return finish();
  }

  /// The virtual-memory pool's paths the random workload reaches little: a growth in several
  /// handles (a partial growth must unwind completely: created but not mapped, mapped but not
  /// granted access to the device or to the peer), moving free handles, releasing free memory
  /// above the threshold, a trim, and a single-handle allocation exported and imported.
  run_result run_vmm()
  {
    using vmm_mr      = mr::vmm_pool_memory_resource;
    auto const stream = be_.create_stream();
    if (armed_) { be_.faults().arm(armed_->kind, armed_->n); }
    std::shared_ptr<vmm_mr> pool;
    auto make = [&] {
      pool = std::make_shared<vmm_mr>(mr::vmm_pool_options{.reserve_bytes           = 256 * mib,
                                                           .busy_growth_percent     = 0,
                                                           .handle_bytes            = 2 * mib,
                                                           .release_threshold_bytes = 4 * mib,
                                                           .peer_devices            = {1}},
                                      be_.runtime());
    };
    if (!attempt("construction", make)) { attempt("construction (again)", make); }
    if (pool) {
      mr_ = pool;
      for (std::size_t n : {8 * mib, 4 * mib, 6 * mib}) {  // growths of 4, 2 and 3 handles
        if (void* p = allocate(n, stream)) { live_.push_back({p, n, stream}); }
        check("after a growth");
      }
      free_one(0);
      free_one(1);
      be_.synchronize();
      if (void* p = allocate(12 * mib, stream)) { live_.push_back({p, 12 * mib, stream}); }
      check("after a growth moving free handles");
      while (!live_.empty()) { free_one(0); }
      for (int tries = 0; tries < 2 && !attempt("trim_to", [&] { (void)pool->trim_to(0); });) {
        ++tries;
      }
      check("after a trim");
      single_handle(*pool, 4 * mib, stream);
      check("after a single-handle allocation");
    }
    pool.reset();
    return finish();
  }

 private:
  run_result finish()
  {
    mr_.reset();
    be_.host().complete_all();
    result_.counts = be_.faults().counts();
    result_.fired  = be_.faults().fired();
    be_.faults().settle();
    be_.host().device_synchronize();  // a pool frees what a settled free_async gave back
    check_holds_nothing();
    return std::move(result_);
  }

  /// Allocates a single-handle block, exports it, imports it, and frees all (each step retried
  /// once after the injected failure).
  void single_handle(mr::vmm_pool_memory_resource& pool, std::size_t bytes, cudaStream_t stream)
  {
    void* p{};
    for (int i = 0; i < 2 && p == nullptr; ++i) {
      attempt("allocate_single_handle", [&] { p = pool.allocate_single_handle(bytes, stream); });
    }
    if (p == nullptr) { return; }
    std::optional<vmm_export> e;
    for (int i = 0; i < 2 && !e; ++i) {
      attempt("export_single_handle", [&] { e.emplace(pool.export_single_handle(p)); });
    }
    if (e) {
      std::optional<imported_vmm_memory> m;
      for (int i = 0; i < 2 && !m; ++i) {
        attempt("imported_vmm_memory", [&] { m.emplace(e->fd.get(), e->bytes, 0, be_.runtime()); });
      }
    }
    pool.deallocate_async(p, bytes, stream);
  }

  struct block {
    void* ptr{};
    std::size_t bytes{};
    cudaStream_t stream{};
  };

  std::uint64_t next(std::uint64_t bound)
  {
    rng_ = rng_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return (rng_ >> 33) % bound;
  }

  void problem(std::string what) { result_.problems.push_back(std::move(what)); }

  /// Whether an exception from `what` is the injected failure, reported properly. Anything else
  /// is a problem: a failure nobody injected, an untyped exception, a message not naming the call.
  void judge(char const* what, bool fired_before, std::string const& type, std::string const& msg)
  {
    bool const ours = armed_ && !fired_before && be_.faults().fired();
    if (!ours) {
      // A refused unmap leaves a mapping the resource believes gone: a later map there fails, as
      // it would on CUDA. Tolerated (typed) — the rest of the checks still apply.
      if (armed_ && armed_->kind == fault_kind::vmm_unmap && be_.faults().fired()) { return; }
      problem(detail::format(what, " threw ", type, " without an injected failure: ", msg));
      return;
    }
    result_.reported = true;
    // The pool API (src/pool) words its own errors: they name the operation and CUDA's status.
    bool const pool_api = armed_->kind >= fault_kind::mem_pool_create;
    // The stream-ordered allocator's resources probe the device when they are built, and report a
    // failed probe as "unavailable" / "not supported" (by design: see pool_capabilities).
    bool const probe =
        std::string_view{what} == "construction" && (armed_->kind == fault_kind::current_device ||
                                                     armed_->kind == fault_kind::device_attribute);
    bool const named = probe || msg.find(cuda_call(armed_->kind)) != std::string::npos ||
                       (pool_api && msg.find(be_.faults().fired_status()) != std::string::npos);
    if (!named) {
      problem(detail::format(what, " threw ", type, " not naming ", cuda_call(armed_->kind),
                             pool_api ? " or its status" : "", ": ", msg));
    }
  }

  /// Runs f; true when it returned. Typed exceptions are judged (the injected failure only when
  /// it fired during f), others are problems.
  template <class F>
  bool attempt(char const* what, F&& f)
  {
    bool const before = be_.faults().fired();
    try {
      f();
      return true;
    } catch (unsupported const&) {
      throw;  // the stack cannot exist here: the test skips
    } catch (gpumem::out_of_memory const& e) {
      judge(what, before, "out_of_memory", e.what());
    } catch (gpumem::bad_alloc const& e) {
      judge(what, before, "bad_alloc", e.what());
    } catch (gpumem::cuda_error const& e) {
      judge(what, before, "cuda_error", e.what());
    } catch (gpumem::logic_error const& e) {
      judge(what, before, "logic_error", e.what());
    } catch (std::exception const& e) {
      problem(detail::format(what, " threw an exception gpumem does not throw: ", e.what()));
    }
    return false;
  }

  template <class Maker>
  void construct()
  {
    if (attempt("construction", [&] { mr_ = Maker::make(be_); })) { return; }
    attempt("construction (again)", [&] { mr_ = Maker::make(be_); });
  }

  /// Allocates (retrying once after the injected failure); null when it could not.
  void* allocate(std::size_t bytes, cudaStream_t stream)
  {
    void* p{};
    for (int tries = 0; tries < 2 && p == nullptr; ++tries) {
      attempt("allocate", [&] { p = mr_->allocate_async(bytes, stream); });
    }
    return p;
  }

  void free_one(std::size_t at)
  {
    auto const b = live_[at];
    live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(at));
    mr_->deallocate_async(b.ptr, b.bytes, b.stream);
  }

  void random_operations(cudaStream_t const (&streams)[3])
  {
    static constexpr std::size_t sizes[] = {256,     1000,    4096,    65536,    300'000,
                                            1 * mib, 3 * mib, 6 * mib, 10 * mib, 12 * mib};
    for (int op = 0; op < 80; ++op) {
      auto const r = next(100);
      // The first quarter on one stream (the pools' solo mode), then on all three.
      auto const pick = [&] { return op < 20 ? streams[1] : streams[next(3)]; };
      if (r < 50 || live_.empty()) {
        auto const bytes  = sizes[next(std::size(sizes))];
        auto const stream = pick();
        if (void* p = allocate(bytes, stream)) { live_.push_back({p, bytes, stream}); }
      } else if (r < 85) {
        free_one(next(live_.size()));
      } else if (r < 93) {
        be_.hold(op < 20 ? streams[1] : streams[1 + next(2)]);
      } else {
        be_.release(op < 20 ? streams[1] : streams[1 + next(2)]);
      }
    }
  }

  void check(char const* when)
  {
    try {
      check_resource(*mr_);
      be_.host().check_invariants();
      check_vmm_backing();
    } catch (std::exception const& e) {
      problem(detail::format("invariant broken ", when, ": ", e.what()));
    }
  }

  /// A virtual-memory pool's idea of what it maps is what the runtime maps: no handle or mapping
  /// of a failed growth is left behind (unless a refused unmap or release kept one).
  void check_vmm_backing()
  {
    auto const* pool = dynamic_cast<mr::vmm_pool_memory_resource const*>(mr_.get());
    if (pool == nullptr || be_.faults().refused() != 0) { return; }
    auto const mine = pool->stats();
    auto const real = be_.host().vmm_state();
    if (real.handles != mine.handles + mine.spare_handles + mine.single_handle_allocations ||
        real.physical_bytes != mine.held_bytes + mine.single_handle_bytes) {
      problem(detail::format("the pool maps ", mine.mapped_bytes, " bytes in ", mine.handles,
                             " handles (and keeps ", mine.spare_handles, " spare handles of ",
                             mine.spare_bytes, " bytes and ", mine.single_handle_allocations,
                             " single handles) but the runtime holds ", real.handles,
                             " handles of ", real.physical_bytes, " bytes"));
    }
  }

  void check_holds_nothing()
  {
    auto& host     = be_.host();
    auto const vmm = host.vmm_state();
    if (host.live_allocations() != 0 || vmm.handles != 0 || vmm.mappings != 0 ||
        vmm.reservations != 0 || host.live_events() != 0 || host.live_pools() != 0 ||
        host.used_bytes() != 0) {
      problem(detail::format("the runtime still holds ", host.live_allocations(),
                             " allocation(s), ", vmm.handles, " handle(s), ", vmm.mappings,
                             " mapping(s), ", vmm.reservations, " reservation(s), ",
                             host.live_events(), " event(s), ", host.live_pools(), " pool(s), ",
                             host.used_bytes(), " bytes"));
    }
    try {
      host.check_invariants();
    } catch (std::exception const& e) {
      problem(detail::format("the runtime's invariants after destruction: ", e.what()));
    }
  }

  std::optional<site> armed_;
  fault_backend be_;
  std::shared_ptr<mr::device_memory_resource> mr_;
  std::vector<block> live_;
  std::uint64_t rng_{0x9e3779b97f4a7c15ULL};
  run_result result_;
};

/// The n of each site of a kind called `count` times: all of them up to 64 (every site of
/// today's workloads), else 64 spread evenly (the first and the last included).
std::vector<std::uint64_t> sample(std::uint64_t count)
{
  constexpr std::uint64_t most = 64;
  std::vector<std::uint64_t> out;
  if (count <= most) {
    for (std::uint64_t n = 1; n <= count; ++n) { out.push_back(n); }
    return out;
  }
  for (std::uint64_t i = 0; i < most; ++i) { out.push_back(1 + i * (count - 1) / (most - 1)); }
  return out;
}

/// Sites covered per stack, reported at the end.
std::map<std::string, std::pair<std::size_t, std::string>>& coverage()
{
  static std::map<std::string, std::pair<std::size_t, std::string>> sites;
  return sites;
}

class coverage_report : public ::testing::Environment {
 public:
  void TearDown() override
  {
    std::size_t total{};
    for (auto const& [stack, c] : coverage()) {
      std::cout << "fault injection: " << stack << ": " << c.first << " call sites (" << c.second
                << ")\n";
      total += c.first;
    }
    std::cout << "fault injection: " << total << " (stack, call site) pairs over "
              << coverage().size() << " stacks\n";
  }
};

[[maybe_unused]] auto* const report =
    ::testing::AddGlobalTestEnvironment(new coverage_report);  // gtest owns it

/// Runs `run` armed at every site of the counts (sampled), failing the test for each problem.
/// Returns the number of sites and a summary: the kinds ("allocate 42/42, ...": sites run / calls
/// made) and how many failures surfaced as typed errors.
template <class Run>
std::pair<std::size_t, std::string> for_each_site(fault_counts const& counts, Run run)
{
  std::size_t sites{};
  std::size_t reported{};
  std::string kinds;
  for (std::size_t k = 0; k < fault_kind_count; ++k) {
    auto const kind = static_cast<fault_kind>(k);
    if (counts[k] == 0) { continue; }
    auto const ns = sample(counts[k]);
    kinds +=
        detail::format(kinds.empty() ? "" : ", ", to_string(kind), " ", ns.size(), "/", counts[k]);
    for (auto n : ns) {
      site const s{kind, n};
      auto const r = run(s);
      ++sites;
      reported += r.reported ? 1 : 0;
      EXPECT_TRUE(r.fired) << describe(s) << " was never reached";
      for (auto const& p : r.problems) { ADD_FAILURE() << describe(s) << ": " << p; }
    }
  }
  kinds += detail::format("; ", reported, " thrown to the caller, ", sites - reported, " absorbed");
  return {sites, kinds};
}

// The conformance makers of the stream-ordered allocator's resources refuse the host backend; the
// host stand-in models CUDA's memory pools, so here they are built over it, as those makers build
// them on a GPU.
struct host_cuda_async_maker {
  static constexpr char const* name = "cuda_async";
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    return std::make_shared<mr::cuda_async_memory_resource>(64 * mib, std::nullopt, std::nullopt,
                                                            b.runtime());
  }
};

struct host_cuda_async_view_maker {
  static constexpr char const* name = "cuda_async_view";
  static std::shared_ptr<mr::device_memory_resource> make(backend& b)
  {
    struct pool_and_view {
      explicit pool_and_view(detail::runtime& rt)
          : pool{pool_properties{.location = pool_location::device(0)}, rt}, view{pool.handle(), rt}
      {
      }
      memory_pool pool;
      mr::cuda_async_view_memory_resource view;
    };
    auto both = std::make_shared<pool_and_view>(b.runtime());
    return {both, &both->view};
  }
};

template <class Maker>
class fault_injection : public ::testing::Test {
};

// The host configurations of the conformance list (resources.hpp), in its order.
using makers =
    ::testing::Types<cuda_maker, managed_maker, system_maker, sam_headroom_maker,
                     host_cuda_async_maker, host_cuda_async_view_maker, pool_maker, vmm_pool_maker,
                     fixed_size_maker, binning_maker, arena_maker, caching_maker, callback_maker,
                     aligned_maker, failure_callback_maker, limiting_maker, logging_maker,
                     prefetch_maker, statistics_maker, thread_safe_maker, tracking_maker,
                     owning_wrapper_maker, thread_cache_pool_maker, thread_cache_arena_maker,
                     thread_cache_vmm_pool_maker, adaptor_stack_maker>;

struct maker_names {
  template <class M>
  static std::string GetName(int)
  {
    return M::name;
  }
};

TYPED_TEST_SUITE(fault_injection, makers, maker_names);

TYPED_TEST(fault_injection, EveryCallSiteFailsCleanly)
{
  using maker = TypeParam;
  run_result baseline;
  try {
    baseline = workload{std::nullopt}.run<maker>();
  } catch (unsupported const& e) {
    GTEST_SKIP() << maker::name << " unsupported on the host stand-in: " << e.what();
  }
  for (auto const& p : baseline.problems) { ADD_FAILURE() << "unarmed run: " << p; }
  if (!baseline.problems.empty()) { return; }

  auto const [sites, kinds] =
      for_each_site(baseline.counts, [](site s) { return workload{s}.template run<maker>(); });
  coverage()[maker::name] = {sites, kinds};
  ::testing::Test::RecordProperty("call_sites", static_cast<int>(sites));
  std::cout << maker::name << ": " << sites << " call sites: " << kinds << "\n";
}

// The virtual-memory pool's multi-handle growth, trim and single-handle IPC, every call site.
TEST(fault_injection_vmm_pool, GrowthTrimAndSingleHandlesFailCleanly)
{
  auto const baseline = workload{std::nullopt}.run_vmm();
  for (auto const& p : baseline.problems) { ADD_FAILURE() << "unarmed run: " << p; }
  ASSERT_TRUE(baseline.problems.empty());
  auto const [sites, kinds] =
      for_each_site(baseline.counts, [](site s) { return workload{s}.run_vmm(); });
  coverage()["vmm_pool (growth, trim, single handles)"] = {sites, kinds};
  ::testing::Test::RecordProperty("call_sites", static_cast<int>(sites));
  std::cout << "vmm_pool (growth, trim, single handles): " << sites << " call sites: " << kinds
            << "\n";
}

// The injector itself: the n-th call of the armed kind fails once, as CUDA fails it; a refused
// free is done late by settle().
TEST(fault_injecting_runtime, FailsTheNthCallOnceAndSettlesRefusals)
{
  fault_backend be;
  auto& rt = be.faults();
  rt.arm(fault_kind::allocate, 2);
  void* a = rt.allocate(detail::memory_kind::device, 256);
  EXPECT_FALSE(rt.fired());
  try {
    (void)rt.allocate(detail::memory_kind::device, 256);
    ADD_FAILURE() << "the second allocate did not fail";
  } catch (gpumem::out_of_memory const& e) {
    EXPECT_NE(std::string{e.what()}.find("cudaMalloc"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(rt.fired());
  void* b = rt.allocate(detail::memory_kind::device, 256);  // once only
  rt.arm(fault_kind::event_record, 1);
  auto const event = rt.event_create();
  EXPECT_THROW(rt.event_record(event, nullptr), gpumem::cuda_error);
  rt.event_destroy(event);
  rt.arm(fault_kind::free, 1);
  rt.free(detail::memory_kind::device, a);
  EXPECT_EQ(rt.refused(), 1U);
  EXPECT_EQ(be.host().live_allocations(), 2U);  // the refused free kept `a`
  rt.free(detail::memory_kind::device, b);
  rt.settle();
  EXPECT_EQ(rt.refused(), 0U);
  EXPECT_EQ(be.host().live_allocations(), 0U);
  EXPECT_EQ(rt.counts()[static_cast<std::size_t>(fault_kind::allocate)], 3U);
}

// Regression (found by the suite): a single-handle allocation freed on a stream still busy waits
// behind an event; when the pool's destructor could not synchronize that event, the allocation's
// mapping, handle, reservation and event were never given back.
TEST(fault_injection_regressions, WaitingSingleHandleIsReleasedWhenTheLastSyncFails)
{
  fault_backend be;
  auto const stream = be.create_stream();
  {
    mr::vmm_pool_memory_resource pool{mr::vmm_pool_options{.reserve_bytes = 64 * mib},
                                      be.runtime()};
    be.hold(stream);  // the free below waits behind this work
    void* p = pool.allocate_single_handle(2 * mib, stream);
    pool.deallocate_async(p, 2 * mib, stream);
    be.faults().arm(fault_kind::event_synchronize, 1);
  }
  EXPECT_TRUE(be.faults().fired());
  auto const vmm = be.host().vmm_state();
  EXPECT_EQ(vmm.handles, 0U);
  EXPECT_EQ(vmm.mappings, 0U);
  EXPECT_EQ(vmm.reservations, 0U);
  EXPECT_EQ(be.host().live_events(), 0U);
  EXPECT_EQ(be.host().used_bytes(), 0U);
}

// Regression (found by the suite): when the arena could not record its release event, a freed
// block was dropped (counted as a bad deallocation and never reusable).
TEST(fault_injection_regressions, ArenaFreeSurvivesAFailedReleaseEvent)
{
  fault_backend be;
  auto const stream = be.create_stream();
  mr::cuda_memory_resource upstream{be.runtime()};
  mr::arena_memory_resource<mr::cuda_memory_resource> arena{&upstream, 64 * mib, false,
                                                            be.runtime()};
  void* p = arena.allocate_async(40 * mib, stream);
  be.faults().arm(fault_kind::event_record, 1);
  arena.deallocate_async(p, 40 * mib, stream);
  EXPECT_TRUE(be.faults().fired());
  EXPECT_EQ(arena.bad_deallocations(), 0U);
  arena.check_invariants();
  void* q{};
  EXPECT_NO_THROW(q = arena.allocate_async(40 * mib, stream));  // the 40 MiB are free again
  arena.deallocate_async(q, 40 * mib, stream);
}

// Regression (found by the suite under LeakSanitizer): when cudaMemGetInfo failed after the system
// allocation, sam_headroom threw without freeing it. (The leak is host memory, which the runtime
// does not hold: the ASan build of this test is what sees it.)
TEST(fault_injection_regressions, SamHeadroomFreesWhenMemGetInfoFails)
{
  fault_backend be;
  mr::sam_headroom_memory_resource sam{mib, be.runtime()};
  be.faults().arm(fault_kind::memory_info, 1);
  EXPECT_THROW((void)sam.allocate(4 * mib), gpumem::cuda_error);
  EXPECT_TRUE(be.faults().fired());
  void* p = sam.allocate(4 * mib);
  sam.deallocate(p, 4 * mib);
}

}  // namespace
}  // namespace gpumem::test
