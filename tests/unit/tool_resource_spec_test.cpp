// The resource-spec grammar and the factory table: parsing, sizes, diagnoses, building stacks.
#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/caching_memory_resource.hpp>
#include <gpumem/mr/thread_cache_resource_adaptor.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>
#include <gpumem/spec/resource_factory.hpp>
#include <gpumem/spec/resource_spec.hpp>

#include <gtest/gtest.h>

#include <string>

namespace gpumem::spec {
namespace {

std::string error_of(auto&& fn)
{
  try {
    fn();
  } catch (spec_error const& e) {
    return e.what();
  }
  return "no error";
}

TEST(ResourceSpec, ParsesLayersAndParams)
{
  auto s = parse_resource_spec(" pool:initial=1GiB, max=4GiB > statistics>cuda ");
  ASSERT_EQ(s.layers.size(), 3U);
  EXPECT_EQ(s.layers[0].name, "pool");
  ASSERT_EQ(s.layers[0].params.size(), 2U);
  EXPECT_EQ(s.layers[0].params[1].key, "max");
  EXPECT_EQ(s.layers[0].params[1].value, "4GiB");
  EXPECT_EQ(s.layers[2].name, "cuda");
  EXPECT_EQ(to_string(s), "pool:initial=1GiB,max=4GiB>statistics>cuda");
}

TEST(ResourceSpec, SyntaxErrorsPointAtTheProblem)
{
  auto e = error_of([] { (void)parse_resource_spec("pool:initial>cuda"); });
  EXPECT_NE(e.find("expected key=value"), std::string::npos) << e;
  EXPECT_NE(e.find("^"), std::string::npos) << e;
  e = error_of([] { (void)parse_resource_spec("pool>>cuda"); });
  EXPECT_NE(e.find("expected a resource name"), std::string::npos) << e;
  e = error_of([] { (void)parse_resource_spec(""); });
  EXPECT_NE(e.find("empty resource spec"), std::string::npos) << e;
  e = error_of([] { (void)parse_resource_spec("pool:initial="); });
  EXPECT_NE(e.find("has no value"), std::string::npos) << e;
}

TEST(ResourceSpec, SizesWithUnits)
{
  EXPECT_EQ(parse_size("4096"), 4096U);
  EXPECT_EQ(parse_size("256KiB"), 256U << 10);
  EXPECT_EQ(parse_size("1.5GiB"), 3ULL << 29);
  EXPECT_EQ(parse_size("80GB"), 80'000'000'000ULL);
  EXPECT_EQ(parse_size("2m"), 2U << 20);
  EXPECT_EQ(parse_size("max"), SIZE_MAX);
  auto e = error_of([] { (void)parse_size("12 parsecs", "capacity"); });
  EXPECT_NE(e.find("capacity: cannot read '12 parsecs' as a size"), std::string::npos) << e;
  EXPECT_EQ(size_to_string(1U << 30), "1GiB");
  EXPECT_EQ(size_to_string(1536), "1.50KiB");
  EXPECT_EQ(size_to_string(100), "100B");
  EXPECT_EQ(parse_size(size_to_string(3U << 20)), 3U << 20);
}

TEST(ResourceSpec, SizesNear2To64AreExactOrRefused)
{
  EXPECT_EQ(parse_size("9223372036854775808"), std::size_t{1} << 63);  // read as double before
  EXPECT_EQ(parse_size("18446744073709551615"), SIZE_MAX);
  EXPECT_EQ(parse_size("16777215TiB"), std::size_t{16777215} << 40);
  for (auto const* too_big : {"18446744073709551616", "16777216TiB", "99999999999999999999999",
                              "16384.5PiB", "18446744073709551615.9", "1e30"}) {
    EXPECT_THROW((void)parse_size(too_big), spec_error) << too_big;
  }
  EXPECT_THROW((void)parse_size("-1"), spec_error);
  EXPECT_THROW((void)parse_size("1.2.3KiB"), spec_error);
  // found by the size_parser fuzzer: the 2-decimal form rounded past 2^64-1 and did not read back
  auto const near = std::size_t{18446744073510957615ULL};
  EXPECT_EQ(parse_size(size_to_string(near)), near);
}

TEST(ResourceFactory, CountsAndAlignedSizesAreChecked)
{
  detail::host_runtime rt;
  auto e = error_of([&] { (void)build("pool:initial=max", rt, true); });
  EXPECT_NE(e.find("pool parameter initial: 'max' is out of range; give a size from 0B to "
                   "65536TiB"),
            std::string::npos)
      << e;
  e = error_of([&] { (void)build("fixed_size:blocks=-3", rt, true); });
  EXPECT_NE(e.find("'-3' is not a whole number from 0 to"), std::string::npos) << e;
  e = error_of([&] { (void)build("fixed_size:blocks=99999999999999999999", rt, true); });
  EXPECT_NE(e.find("is not a whole number"), std::string::npos) << e;
}

// A spec of a megabyte is not echoed whole: 80 bytes around the place, and the size.
TEST(ResourceSpec, AHugeSpecIsNotEchoedWhole)
{
  std::string const huge = "pool:initial=" + std::string(1 << 20, '1') + "KiB,bad";
  auto e                 = error_of([&] { (void)parse_resource_spec(huge); });
  EXPECT_LT(e.size(), 600U) << e.substr(0, 600);
  EXPECT_NE(e.find("... (1048596 bytes)"), std::string::npos) << e.substr(0, 600);
  EXPECT_NE(e.find("expected key=value (e.g. initial=1GiB), found 'bad'"), std::string::npos)
      << e.substr(0, 600);
  e = error_of([] { (void)parse_size(std::string(5000, 'x'), "size"); });
  EXPECT_LT(e.size(), 300U) << e.substr(0, 300);
}

TEST(ResourceSpec, AKeyGivenTwiceIsRefused)
{
  auto e = error_of([] { (void)parse_resource_spec("pool:initial=1GiB,initial=2GiB>cuda"); });
  EXPECT_NE(e.find("parameter 'initial' of pool is given twice (initial=1GiB and initial=2GiB)"),
            std::string::npos)
      << e;
  EXPECT_NO_THROW((void)parse_resource_spec("pool:initial=1GiB>pool:initial=2GiB>cuda"));
}

// Sizes near 2^64 once wrapped: handle=max gave the smallest handles, binning:min=max meant 2^62.
// Every size parameter is range-checked where it is read, with the parameter, value and range.
TEST(ResourceFactory, SizeParametersAreRangeChecked)
{
  detail::host_runtime rt;
  auto e = error_of([&] { (void)build("vmm_pool:handle=max", rt, true); });
  EXPECT_NE(e.find("vmm_pool parameter handle: 'max' is out of range; give a size from 1B to "
                   "65536TiB"),
            std::string::npos)
      << e;
  e = error_of([&] { (void)build("vmm_pool:reserve=16777215TiB", rt, true); });
  EXPECT_NE(e.find("vmm_pool parameter reserve: '16777215TiB' is out of range"), std::string::npos)
      << e;
  e = error_of([&] { (void)build("binning:min=max>pool", rt, true); });
  EXPECT_NE(e.find("binning parameter min: 'max' is out of range; give a size from 1B to 1TiB"),
            std::string::npos)
      << e;
  e = error_of([&] { (void)build("binning:max=2TiB>pool", rt, true); });
  EXPECT_NE(e.find("binning parameter max: '2TiB' is out of range"), std::string::npos) << e;
  e = error_of([&] { (void)build("fixed_size:block=0", rt, true); });
  EXPECT_NE(e.find("fixed_size parameter block: '0' is out of range"), std::string::npos) << e;
  e = error_of([&] { (void)build("arena:size=max", rt, true); });
  EXPECT_NE(e.find("arena parameter size: 'max' is out of range"), std::string::npos) << e;
  EXPECT_EQ(parse_size_in("1TiB", "x", 1, most_device_bytes), std::size_t{1} << 40);
  EXPECT_EQ(parse_size_in("max", "x", 0, SIZE_MAX), SIZE_MAX);
  EXPECT_THROW((void)parse_size_in("0", "x", 1, 2), spec_error);
}

TEST(ResourceFactory, UnknownNameListsTheValidOnes)
{
  auto e = error_of([] { (void)find_entry("poool"); });
  EXPECT_NE(e.find("unknown resource 'poool'"), std::string::npos) << e;
  for (auto const& entry : factory_table()) {
    EXPECT_NE(e.find(std::string{entry.name}), std::string::npos) << entry.name;
  }
}

TEST(ResourceFactory, EveryNameIsListedOnce)
{
  auto table = factory_table();
  for (std::size_t i = 0; i < table.size(); ++i) {
    for (std::size_t j = i + 1; j < table.size(); ++j) { EXPECT_NE(table[i].name, table[j].name); }
  }
  EXPECT_NE(describe_factory().find("cuda (leaf)"), std::string::npos);
}

TEST(ResourceFactory, BuildsOverTheSimulatedRuntimeAndAppendsTheLeaf)
{
  detail::host_runtime rt{{.capacity_bytes = 1U << 30, .backed = false, .auto_complete = true}};
  auto stack = build("cuda", rt, true);
  EXPECT_EQ(stack.spec(), "cuda");
  void* p = stack.top().allocate(1000);
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(rt.used_bytes(), 1024U);
  stack.top().deallocate(p, 1000);
  EXPECT_EQ(rt.used_bytes(), 0U);
}

TEST(ResourceFactory, BuildDiagnoses)
{
  detail::host_runtime rt{{.backed = false, .auto_complete = true}};
  auto e = error_of([&] { (void)build("cuda>managed", rt, true); });
  EXPECT_NE(e.find("'cuda' is a leaf and takes no upstream"), std::string::npos) << e;
  e = error_of([&] { (void)build("cub_caching", rt, true); });
  EXPECT_NE(e.find("needs a GPU"), std::string::npos) << e;
  e = error_of([&] { (void)build("cuda:size=1", rt, true); });
  EXPECT_NE(e.find("'cuda' has no parameter 'size'"), std::string::npos) << e;
  e = error_of([&] { (void)build("cub_caching:bin_grow=2", rt, false); });
  EXPECT_NE(e.find("bin_growth (default 8)"), std::string::npos) << e;
}

// Each default is written once, in the C++ options struct: a layer built from the table with no
// parameter given has exactly the options a default-constructed struct holds.
TEST(ResourceFactory, TableDefaultsAreTheOptionsDefaults)
{
  detail::host_runtime rt{{.backed = false}};
  {
    auto stack    = build("vmm_pool", rt, true);
    auto const& o = dynamic_cast<mr::vmm_pool_memory_resource const&>(stack.top()).options();
    mr::vmm_pool_options const d{};
    EXPECT_EQ(o.reserve_bytes, d.reserve_bytes);
    EXPECT_EQ(o.granularity_bytes, d.granularity_bytes);
    EXPECT_EQ(o.growth_percent, d.growth_percent);
    EXPECT_EQ(o.busy_growth_percent, d.busy_growth_percent);
    EXPECT_EQ(o.handle_bytes, d.handle_bytes);
    EXPECT_EQ(o.release_threshold_bytes, d.release_threshold_bytes);
    EXPECT_EQ(o.all_peers, d.all_peers);
    EXPECT_EQ(o.peer_devices, d.peer_devices);
    EXPECT_EQ(o.shareable_handles, d.shareable_handles);
    EXPECT_EQ(o.gpu_direct_rdma, d.gpu_direct_rdma);
  }
  {
    auto stack = build("thread_cache>pool", rt, true);  // over a lean pool the floor caps a thread
    auto const& o =
        dynamic_cast<mr::thread_cache_resource_adaptor<mr::device_memory_resource> const&>(
            stack.top())
            .options();
    mr::thread_cache_options const d{};
    EXPECT_EQ(o.max_cached_size_bytes, d.max_cached_size_bytes);
    EXPECT_EQ(o.thread_cap_bytes, d.thread_cap_bytes);
    EXPECT_EQ(o.total_cap_bytes, d.total_cap_bytes);
    EXPECT_EQ(o.pool_fraction, d.pool_fraction);
    EXPECT_EQ(o.thread_floor_bytes, d.thread_floor_bytes);
    // What lies below is found by the adaptor itself: the pool's size and growth hook.
    EXPECT_TRUE(o.upstream_pool_bytes);
    EXPECT_NE(o.upstream_growth, nullptr);
  }
  {
    auto stack    = build("caching>cuda", rt, true);
    auto const& c = dynamic_cast<mr::caching_memory_resource const&>(stack.top());
    mr::caching_memory_resource_options const d{};
    auto power = [](std::size_t base, unsigned exp) {
      std::size_t v = 1;
      while (exp-- > 0) { v *= base; }
      return v;
    };
    auto const smallest = power(d.bin_growth, d.min_bin);
    auto const largest  = power(d.bin_growth, d.max_bin);
    EXPECT_EQ(c.block_for(1), smallest);
    EXPECT_EQ(c.block_for(smallest + 1), smallest * d.bin_growth);
    EXPECT_EQ(c.block_for(largest), largest);
    EXPECT_EQ(c.block_for(largest + 1), 0U);
  }
}

TEST(ResourceFactory, VmmPoolPeersAreAllOrNone)
{
  detail::host_runtime rt{
      {.capacity_bytes = 1U << 30, .backed = false, .auto_complete = true, .device_count = 2}};
  auto stack = build("vmm_pool:peers=all,reserve=256MiB", rt, true);
  void* p    = stack.top().allocate(1000);
  EXPECT_TRUE(rt.vmm_accessible_by(p, 1)) << "the other device was given access";
  stack.top().deallocate(p, 1000);
  auto const e = error_of([&] { (void)build("vmm_pool:peers=1", rt, true); });
  EXPECT_NE(e.find("vmm_pool: peers must be all or none, got 1"), std::string::npos) << e;
}

TEST(ResourceFactory, VmmPoolGrowthPercentagesAreChecked)
{
  detail::host_runtime rt{{.capacity_bytes = 1U << 30, .backed = false, .auto_complete = true}};
  (void)build("vmm_pool:growth=10,busy_growth=0,reserve=256MiB", rt, true);
  auto e = error_of([&] { (void)build("vmm_pool:busy_growth=2000", rt, true); });
  EXPECT_NE(e.find("vmm_pool: busy_growth must be a percentage from 0 to 1000, got 2000"),
            std::string::npos)
      << e;
  e = error_of([&] { (void)build("vmm_pool:growth=-1", rt, true); });
  EXPECT_NE(e.find("vmm_pool: growth must be a percentage"), std::string::npos) << e;
}

TEST(ResourceFactory, EveryHostCapableEntryBuildsAndServes)
{
  for (auto const& e : factory_table()) {
    if (e.needs_gpu || e.kind == resource_kind::peer) { continue; }
    std::string spec{e.default_run.empty() ? e.name : e.default_run};
    if (e.name == "logging") { spec = "logging:file=/dev/null"; }
    if (e.name == "managed") { continue; }  // managed memory over the host stand-in: leaf tests
    SCOPED_TRACE(spec);
    detail::host_runtime rt{{.capacity_bytes = 8ULL << 30, .backed = false, .auto_complete = true}};
    auto stack = build(spec, rt, true);
    void* p    = stack.top().allocate(1000);
    void* q    = stack.top().allocate(300000);
    EXPECT_NE(p, q);
    stack.top().deallocate(p, 1000);
    stack.top().deallocate(q, 300000);
  }
}

// Hostile parameters: every parameter of every entry that runs without a GPU, at each extreme a
// user may write, is either refused with a typed error or builds a stack that serves requests (or
// refuses them with out_of_memory) and frees them: no other exception, no crash, no hang.
TEST(ResourceFactory, EveryParameterAtItsExtremesIsRefusedOrServes)
{
  char const* const values[] = {"0",    "1",   "255",        "4097",     "1MiB",
                                "1000", "max", "4294967295", "65536TiB", "none",
                                "true", "all", "-1",         "1e999",    "18446744073709551615"};
  std::size_t built          = 0;
  for (auto const& e : factory_table()) {
    if (e.needs_gpu || e.kind == resource_kind::peer || e.name == "managed") { continue; }
    for (auto const& p : e.params) {
      if (p.key == "file") { continue; }  // a file name: any text is one
      for (char const* v : values) {
        std::string spec = std::string{e.name} + ":" + std::string{p.key} + "=" + v;
        if (e.name == "logging") { spec += ",file=/dev/null"; }
        if (e.kind == resource_kind::adaptor) { spec += ">pool"; }
        SCOPED_TRACE(spec);
        detail::host_runtime rt{
            {.capacity_bytes = 8ULL << 30, .backed = false, .auto_complete = true}};
        try {
          auto stack = build(spec, rt, true);
          ++built;
          for (std::size_t const n :
               {std::size_t{1000}, std::size_t{300000}, std::size_t{64} << 20}) {
            try {
              void* q = stack.top().allocate(n);
              stack.top().deallocate(q, n);
            } catch (gpumem::bad_alloc const&) {  // refused: the stack stays usable
            }
          }
          void* q = nullptr;
          try {
            q = stack.top().allocate(1000);
          } catch (gpumem::bad_alloc const&) {
          }
          if (q != nullptr) { stack.top().deallocate(q, 1000); }
        } catch (gpumem::logic_error const&) {  // spec_error among them
        } catch (gpumem::out_of_range const&) {
        } catch (gpumem::bad_alloc const&) {  // a pool that reserves more than the device has
        } catch (gpumem::cuda_error const&) {
        } catch (std::exception const& x) {
          ADD_FAILURE() << "untyped error: " << x.what();
        }
      }
    }
  }
  EXPECT_GT(built, 50U) << "most extremes build";
}

TEST(ResourceFactory, DefaultRunListComesFromTheTable)
{
  std::size_t suballocators = 0;
  for (auto const& e : factory_table()) {
    if (e.kind == resource_kind::suballocator && !e.default_run.empty()) { ++suballocators; }
    if (!e.default_run.empty()) {
      EXPECT_EQ(parse_resource_spec(e.default_run).layers[0].name, e.name);
    }
  }
  EXPECT_GE(suballocators, 1U);
}

}  // namespace
}  // namespace gpumem::spec
