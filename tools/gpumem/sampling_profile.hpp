// `gpumem bench --profile`: where the host threads spend their time, as a flat profile by
// function for each measurement (a workload row of one stack).
//
// Each thread inside a timed loop (measured_scope) has a timer of its own that sends it SIGPROF
// every 100 µs of wall-clock time, so time spent waiting (a lock, a driver call) shows up where
// it is spent. The signal handler stores the interrupted instruction address and the current
// measurement's number in a fixed array (one atomic increment, nothing else: it is
// async-signal-safe). At the end, addresses are named: functions of shared libraries (the CUDA
// driver, the C library) by dladdr, the tool's own from its debug information by addr2line when
// it is installed (detail::symbolize: started without a shell, so any path works; else by module
// and offset), and counted per function.
// Invariant: at most one profile runs per process; samples beyond the array's size are dropped
// and counted.
#pragma once

#include <time.h>

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

namespace gpumem::tool {

class sampling_profile {
 public:
  /// Starts sampling. Throws runtime_error when another profile runs or the timer can't be set.
  sampling_profile();
  sampling_profile(sampling_profile const&)            = delete;
  sampling_profile& operator=(sampling_profile const&) = delete;
  /// Stops sampling.
  ~sampling_profile();

  /// Samples from now on belong to the measurement `label` (until the next call).
  void begin(std::string const& label);
  /// Samples from now on belong to no measurement (set-up, clean-up).
  void end() noexcept;

  /// True on a thread while it runs a timed loop: only such threads' samples count.
  static inline thread_local constinit bool measuring = false;
  /// Marks the calling thread as measured for its scope and, while a profile runs, samples it.
  class measured_scope {
   public:
    measured_scope() noexcept;
    ~measured_scope();
    measured_scope(measured_scope const&)            = delete;
    measured_scope& operator=(measured_scope const&) = delete;

   private:
    timer_t timer_{};
    bool armed_{};
  };

  /// Stops sampling and writes, for each measurement, its sample count and the functions that
  /// took at least `min_percent` of its samples (at most `top` of them).
  void write(std::ostream& out, double min_percent = 1.0, std::size_t top = 15);

 private:
  std::vector<std::string> labels_;
  bool stopped_{};
  void stop() noexcept;
};

}  // namespace gpumem::tool
