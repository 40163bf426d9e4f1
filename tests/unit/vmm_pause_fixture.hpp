// The fixture the pause tests share (vmm_pool_pause_test, vmm_pool_pause_file_test): a backed host
// stand-in of 128 MiB with one stream, pools of 4 MiB handles, and blocks filled with bytes that
// depend on a seed, checked at their addresses after a pause and resume.
#pragma once

#include "suballocator_test_helpers.hpp"

#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

namespace gpumem::test {

struct vmm_pause_fixture : ::testing::Test {
  using vmm_pool = mr::vmm_pool_memory_resource;

  detail::host_runtime rt{detail::host_runtime_options{.capacity_bytes = 128 * MiB}};
  cudaStream_t a = rt.create_stream();

  vmm_pool make(mr::vmm_pool_options o = {})
  {
    if (o.reserve_bytes == 0) { o.reserve_bytes = 256 * MiB; }
    o.handle_bytes = 4 * MiB;
    return vmm_pool{o, rt};
  }
  void check(vmm_pool const& pool)
  {
    pool.check_invariants();
    rt.check_invariants();
    EXPECT_EQ(rt.vmm_state().misuse_count, 0U);
  }
  /// Fills [p, p + n) with bytes that depend on the seed (eight at a time: the blocks are large).
  static void fill(void* p, std::size_t n, unsigned seed)
  {
    std::mt19937_64 gen{seed};
    auto* bytes = static_cast<unsigned char*>(p);
    for (std::size_t i = 0; i < n; i += 8) {
      auto const word = gen();
      std::memcpy(bytes + i, &word, std::min<std::size_t>(8, n - i));
    }
  }
  static bool holds(void const* p, std::size_t n, unsigned seed)
  {
    std::vector<unsigned char> want(n);
    fill(want.data(), n, seed);
    return std::memcmp(p, want.data(), n) == 0;
  }
  struct block {
    void* p;
    std::size_t n;
  };
  /// Live blocks of these sizes, each filled with its own bytes (seeds 1, 2, ...).
  std::vector<block> populate(vmm_pool& pool, std::vector<std::size_t> const& sizes)
  {
    std::vector<block> blocks;
    for (std::size_t n : sizes) {
      blocks.push_back({pool.allocate(n, a), n});
      fill(blocks.back().p, n, static_cast<unsigned>(blocks.size()));
    }
    return blocks;
  }
  /// Live blocks over several handles.
  std::vector<block> populate(vmm_pool& pool)
  {
    return populate(pool, {3 * MiB, 10 * MiB, MiB + 512, 17 * MiB});
  }
  void expect_intact(detail::host_runtime& r, std::vector<block> const& blocks)
  {
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      r.vmm_check_mapped(blocks[i].p, blocks[i].n);
      EXPECT_TRUE(holds(blocks[i].p, blocks[i].n, static_cast<unsigned>(i + 1))) << "block " << i;
    }
  }
  void expect_intact(std::vector<block> const& blocks) { expect_intact(rt, blocks); }
  void release(vmm_pool& pool, std::vector<block> const& blocks)
  {
    for (auto const& b : blocks) { pool.deallocate(b.p, b.n, a); }
  }
};

}  // namespace gpumem::test
