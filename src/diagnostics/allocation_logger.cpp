// The CSV writer of logging_resource_adaptor (see detail/diagnostics/allocation_logger.hpp for the
// format).
#include <gpumem/detail/diagnostics/allocation_logger.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/diagnostics/stack_trace.hpp>
#include <gpumem/error.hpp>
#include <gpumem/trace/trace_event.hpp>
#include <gpumem/trace/trace_writer.hpp>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string_view>

namespace gpumem::detail {

allocation_logger::allocation_logger(std::vector<std::shared_ptr<std::ostream>> sinks,
                                     bool auto_flush, bool stacks)
    : sinks_{std::move(sinks)}, auto_flush_{auto_flush}, stacks_{stacks}
{
  GPUMEM_EXPECTS(!sinks_.empty(), logic_error, "logging_resource_adaptor: no log sink given");
  for (auto const& sink : sinks_) {
    GPUMEM_EXPECTS(sink != nullptr, logic_error, "logging_resource_adaptor: null log sink");
    *sink << header_line() << '\n';
    if (auto_flush_) { sink->flush(); }
  }
}

std::string format_log_line(int thread, long long time_us, char const* action, void const* ptr,
                            std::size_t bytes, cudaStream_t stream)
{
  char buf[160];
  std::snprintf(buf, sizeof buf, "%d,%lld,%s,0x%" PRIxPTR ",%zu,%" PRIuPTR, thread, time_us, action,
                reinterpret_cast<std::uintptr_t>(ptr), bytes,
                reinterpret_cast<std::uintptr_t>(stream));
  return buf;
}

int allocation_logger::thread_index()
{
  auto const [it, inserted] =
      threads_.try_emplace(std::this_thread::get_id(), static_cast<int>(threads_.size()));
  return it->second;
}

void allocation_logger::log(char const* action, void const* ptr, std::size_t bytes,
                            cudaStream_t stream) noexcept
{
  try {
    std::string frames;  // captured outside the lock
    if (stacks_ && std::string_view{action} == "allocate") {
      frames = "," + trace::frames_field(stack_trace{}.joined(trace::frame_separator));
    } else if (stacks_) {
      frames = ",";
    }
    write_line(action, ptr, bytes, stream, frames);
  } catch (...) {  // logging must not turn a free into a throw; a lost line is the lesser harm
  }
}

void allocation_logger::log(char const* action, void const* ptr, std::size_t bytes,
                            cudaStream_t stream, std::string_view frames) noexcept
{
  try {
    std::string const tail = stacks_ ? "," + trace::frames_field(std::string{frames}) : "";
    write_line(action, ptr, bytes, stream, tail);
  } catch (...) {  // as above
  }
}

void allocation_logger::write_line(char const* action, void const* ptr, std::size_t bytes,
                                   cudaStream_t stream, std::string const& tail)
{
  std::lock_guard lock{mutex_};
  auto const now = std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  std::string const line = format_log_line(thread_index(), now, action, ptr, bytes, stream) + tail;
  for (auto const& sink : sinks_) {
    *sink << line << '\n';
    if (auto_flush_) { sink->flush(); }
    if (!*sink) { ++lost_lines_; }
  }
}

allocation_logger::~allocation_logger()
{
  try {
    flush();
  } catch (std::exception const& e) {
    std::fprintf(stderr, "gpumem: %s\n", e.what());
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw
  }
}

void allocation_logger::flush()
{
  std::lock_guard lock{mutex_};
  bool failed = false;
  for (auto const& sink : sinks_) {
    sink->flush();
    failed = failed || !*sink;
  }
  if (failed) {
    throw std::runtime_error{
        format("logging_resource_adaptor: writing the log failed (is the disk full?); the log is "
               "incomplete: ",
               lost_lines_, " line(s) were lost before this flush, and possibly buffered ones")};
  }
}

std::uint64_t allocation_logger::lost_lines()
{
  std::lock_guard lock{mutex_};
  return lost_lines_;
}

}  // namespace gpumem::detail
