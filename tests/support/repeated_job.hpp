// A job run again and again over one resource, as a process that builds its buffers, works and
// frees them all, then does it again: a seeded list of allocations and frees on one stream that
// ends with every block freed (the home-layout tests of vmm_pool, on the host stand-in and on a
// GPU).
#pragma once

#include <gpumem/mr/device_memory_resource.hpp>

#include <cstddef>
#include <functional>
#include <random>
#include <vector>

namespace gpumem::test {

struct job_step {
  bool allocate{};
  std::size_t slot{};   // the allocation this step makes or frees
  std::size_t bytes{};  // 0.5 to 12 MiB, not always a multiple of the pool's alignment
};

/// `steps` random steps (55 % allocations) from `seed`, then the frees of what is still live.
inline std::vector<job_step> make_repeated_job(unsigned seed, int steps)
{
  constexpr std::size_t MiB = std::size_t{1} << 20;
  std::mt19937 rng{seed};
  std::vector<job_step> job;
  std::vector<job_step> live;
  std::size_t next = 0;
  for (int i = 0; i < steps; ++i) {
    if (live.empty() || rng() % 100 < 55) {
      std::size_t const halves = 1 + rng() % 24;
      std::size_t const pages  = rng() % 4;
      std::size_t const bytes  = halves * MiB / 2 + pages * 4096;
      job.push_back({true, next, bytes});
      live.push_back({false, next++, bytes});
    } else {
      auto const k = rng() % live.size();
      job.push_back(live[k]);
      live.erase(live.begin() + static_cast<long>(k));
    }
  }
  job.insert(job.end(), live.begin(), live.end());
  return job;
}

/// One run of `job` over `mr` on `stream`: the address of each allocation, in order. `after`
/// (optional) sees each new block (p, bytes) before the next step, `before_free` each block
/// before it is freed.
inline std::vector<void*> run_job(std::vector<job_step> const& job, mr::device_memory_resource& mr,
                                  cuda_stream_view stream,
                                  std::function<void(void*, std::size_t)> const& after       = {},
                                  std::function<void(void*, std::size_t)> const& before_free = {})
{
  std::vector<void*> slots(job.size());
  std::vector<void*> order;
  for (auto const& s : job) {
    if (s.allocate) {
      slots[s.slot] = mr.allocate(s.bytes, stream);
      order.push_back(slots[s.slot]);
      if (after) { after(slots[s.slot], s.bytes); }
    } else {
      if (before_free) { before_free(slots[s.slot], s.bytes); }
      mr.deallocate(slots[s.slot], s.bytes, stream);
    }
  }
  return order;
}

}  // namespace gpumem::test
