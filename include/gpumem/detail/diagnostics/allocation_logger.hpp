// gpumem/detail/diagnostics/allocation_logger.hpp — the CSV writer behind logging_resource_adaptor
// (not API).
//
// Writes "Thread,Time,Action,Pointer,Size,Stream" lines, the trace format the replay tool reads:
//   Thread   small integer, the order in which threads first logged through this logger (0, 1, ..)
//   Time     microseconds since the Unix epoch (system clock)
//   Action   "allocate", "free", or "allocate failure" (a failed allocation; Pointer is 0x0)
//   Pointer  lower-case hex with 0x prefix
//   Size     bytes, decimal
//   Stream   the cudaStream_t handle as a decimal integer (0 = default stream)
//   Frames   only with `stacks`: the allocating call stack (allocate rows; empty on the others),
//            frames innermost first (gpumem's own frames included) joined by '|', CSV-quoted
//            when it holds a comma or a quote. Capturing costs a backtrace() per allocate and
//            resolving its symbols; without `stacks` nothing is captured. log() with a `frames`
//            argument writes the frames it is given instead (a caller that knows a better stack,
//            such as gpumem.torch's Python one); nothing is captured then.
// The header line is written to every sink at construction.
// Thread safety: all members are thread-safe (one mutex; lines are never interleaved).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace gpumem::detail {

class allocation_logger {
 public:
  /// Writes the header to each sink. Throws logic_error when `sinks` is empty or holds a null.
  allocation_logger(std::vector<std::shared_ptr<std::ostream>> sinks, bool auto_flush,
                    bool stacks = false);
  /// Flushes the sinks; says on stderr when lines were lost (a sink failed). Never throws.
  ~allocation_logger();
  allocation_logger(allocation_logger const&)            = delete;
  allocation_logger& operator=(allocation_logger const&) = delete;

  [[nodiscard]] static char const* header() noexcept
  {
    return "Thread,Time,Action,Pointer,Size,Stream";
  }
  /// The header this logger writes (with ",Frames" when it records stacks).
  [[nodiscard]] char const* header_line() const noexcept
  {
    return stacks_ ? "Thread,Time,Action,Pointer,Size,Stream,Frames" : header();
  }
  [[nodiscard]] bool stacks() const noexcept { return stacks_; }

  /// Appends one line to every sink (flushing them when auto_flush). Never throws.
  void log(char const* action, void const* ptr, std::size_t bytes, cudaStream_t stream) noexcept;
  /// As log(), with `frames` (innermost first, joined by '|') as the Frames column instead of a
  /// captured stack; `frames` is ignored when the logger has no Frames column. Never throws.
  void log(char const* action, void const* ptr, std::size_t bytes, cudaStream_t stream,
           std::string_view frames) noexcept;
  /// Flushes every sink; throws std::runtime_error when a sink has failed (a full disk, a
  /// closed stream): the log is then incomplete.
  void flush();
  /// Lines that went to a sink in a failed state (lost).
  [[nodiscard]] std::uint64_t lost_lines();

 private:
  [[nodiscard]] int thread_index();  // caller holds mutex_
  /// Writes one line; `tail` is ",<Frames field>" or empty. Throws what the sinks throw.
  void write_line(char const* action, void const* ptr, std::size_t bytes, cudaStream_t stream,
                  std::string const& tail);

  std::mutex mutex_;
  std::vector<std::shared_ptr<std::ostream>> sinks_;
  bool auto_flush_;
  bool stacks_;
  std::unordered_map<std::thread::id, int> threads_;
  std::uint64_t lost_lines_{};  ///< lines written to a sink that had failed (guarded by mutex_)
};

/// "Thread,...,Stream" fields of one line (no newline); exposed for tests and the trace writer.
[[nodiscard]] std::string format_log_line(int thread, long long time_us, char const* action,
                                          void const* ptr, std::size_t bytes, cudaStream_t stream);

}  // namespace gpumem::detail
