// bench/support/simulated_stacks.hpp — the simulated device the host-side microbenchmarks run on,
// and their resource stacks, built from specs by the resource factory as the gpumem tool builds
// them.
#pragma once

#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/spec/resource_factory.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace gpumem::bench {

/// One simulated 80 GiB device for the whole run (simulated addresses, every stream's work
/// completes at once) with 16 streams: stream i serves benchmark thread i. Never destroyed.
struct sim_device {
  detail::host_runtime rt{detail::host_runtime_options{.backed = false, .auto_complete = true}};
  std::vector<cudaStream_t> streams;
  sim_device()
  {
    for (int i = 0; i < 16; ++i) { streams.push_back(rt.create_stream()); }
  }
};
inline sim_device& dev()
{
  static auto* d = new sim_device{};
  return *d;
}

/// One stack per spec and workload, built over dev() with the table and kept while it lives; each
/// workload has its own, so one workload's leftover free lists do not shape the next one's.
class stack_table {
 public:
  stack_table(std::vector<std::string> const& specs, std::size_t workloads) : workloads_{workloads}
  {
    for (auto const& spec : specs) {
      for (std::size_t w = 0; w < workloads; ++w) {
        stacks_.push_back(spec::build(spec, dev().rt, true));
      }
    }
  }

  /// The stack of specs[subject] for `workload`.
  [[nodiscard]] mr::device_memory_resource& get(std::size_t subject, std::size_t workload) const
  {
    return stacks_[subject * workloads_ + workload].top();
  }

 private:
  std::size_t workloads_;
  std::vector<spec::resource_stack> stacks_;  // [subject * workloads_ + workload]
};

}  // namespace gpumem::bench
