// gpumem/mr/logging_resource_adaptor.hpp — logs every allocation and free as a CSV line.
//
// Format (the traces in shared/traces/ and the replay tool's input):
//   Thread,Time,Action,Pointer,Size,Stream
//   0,1795333732300235,allocate,0x7f5be0000000,154389504,0
// Thread is the order in which threads first logged (0, 1, ...), Time microseconds since the
// epoch, Action "allocate", "free" or "allocate failure" (the upstream threw; Pointer 0x0, the
// exception is rethrown), Pointer hex, Size bytes, Stream the stream handle as a decimal integer.
// A successful allocate is logged after the upstream returns and a free before the memory goes
// back, so in the log a pointer is never allocated again before its free: the log replays.
// Sinks: a file (truncated; name from GPUMEM_LOG_FILE, else RMM_LOG_FILE, when not given), an
// ostream the caller keeps alive, or several shared sinks. The header line goes to each sink at
// construction. With `auto_flush` every line is flushed (slow); otherwise call flush(). Creating
// two adaptors on the same file name is undefined (they overwrite each other).
//
// Call stacks (opt-in, off by default): with logging_options{.stacks = true} the log has a 7th
// column, Frames, holding each allocate's call stack (see
// detail/diagnostics/allocation_logger.hpp); the replay tool shows them in its report. Off, nothing
// is captured and the log has 6 columns. Write failures: log() never throws (a free must not); a
// sink that fails (full disk) is found by flush(), which throws, and at destruction, which says on
// stderr how many lines were lost. Thread safety: all members are thread-safe; lines of different
// threads never interleave. Throws: logic_error for a null upstream or when no file name is given
// and neither GPUMEM_LOG_FILE nor RMM_LOG_FILE is set; std::runtime_error naming the file when it
// cannot be opened; whatever the upstream throws.
#pragma once

#include <gpumem/detail/diagnostics/allocation_logger.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/capabilities.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/resource_ref.hpp>

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace gpumem::mr {

/// A destination for log lines.
using log_sink_ptr = std::shared_ptr<std::ostream>;

/// How a logging_resource_adaptor logs.
struct logging_options {
  bool auto_flush{false};  ///< flush every line (slow)
  bool stacks{false};      ///< record each allocate's call stack (a Frames column; costs a
                           ///< backtrace and symbol lookup per allocate)
};

/// A sink writing to `filename` (truncated). Throws std::runtime_error naming the file and the
/// reason when it cannot be opened.
[[nodiscard]] log_sink_ptr make_file_sink(std::string const& filename);

/// A sink writing to `os`, which the caller keeps alive longer than every adaptor using it.
[[nodiscard]] log_sink_ptr make_ostream_sink(std::ostream& os);

/// The value of GPUMEM_LOG_FILE, else of RMM_LOG_FILE. Throws logic_error when both are unset or
/// empty.
[[nodiscard]] std::string logging_default_filename();

template <typename Upstream>
class logging_resource_adaptor
    : public device_memory_resource,
      public gpumem::detail::forward_properties<logging_resource_adaptor<Upstream>, Upstream>,
      public flushable {
 public:
  /// Logs to `filename` (truncated), by default the value of GPUMEM_LOG_FILE (or RMM_LOG_FILE).
  logging_resource_adaptor(Upstream* upstream, std::string const& filename = get_default_filename(),
                           bool auto_flush = false)
      : logging_resource_adaptor{checked(upstream), {make_file_sink(filename)}, auto_flush}
  {
    this->link_upstream(upstream);
  }

  /// Logs to `stream`, which must outlive the adaptor.
  logging_resource_adaptor(Upstream* upstream, std::ostream& stream, bool auto_flush = false)
      : logging_resource_adaptor{checked(upstream), {make_ostream_sink(stream)}, auto_flush}
  {
    this->link_upstream(upstream);
  }

  /// Logs every line to each of `sinks`.
  logging_resource_adaptor(Upstream* upstream, std::initializer_list<log_sink_ptr> sinks,
                           bool auto_flush = false)
      : logging_resource_adaptor{checked(upstream), sinks, auto_flush}
  {
    this->link_upstream(upstream);
  }

  logging_resource_adaptor(device_async_resource_ref upstream,
                           std::string const& filename = get_default_filename(),
                           bool auto_flush             = false)
      : logging_resource_adaptor{upstream, {make_file_sink(filename)}, auto_flush}
  {
  }

  logging_resource_adaptor(device_async_resource_ref upstream, std::ostream& stream,
                           bool auto_flush = false)
      : logging_resource_adaptor{upstream, {make_ostream_sink(stream)}, auto_flush}
  {
  }

  logging_resource_adaptor(device_async_resource_ref upstream,
                           std::initializer_list<log_sink_ptr> sinks, bool auto_flush = false)
      : logging_resource_adaptor{upstream, sinks, logging_options{.auto_flush = auto_flush}}
  {
  }

  /// Logs every line to each of `sinks`, as `options` say (call stacks: options.stacks).
  logging_resource_adaptor(device_async_resource_ref upstream,
                           std::initializer_list<log_sink_ptr> sinks, logging_options options)
      : upstream_{upstream},
        logger_{std::make_unique<detail::allocation_logger>(std::vector<log_sink_ptr>{sinks},
                                                            options.auto_flush, options.stacks)}
  {
  }

  /// Logs to `filename` (truncated) as `options` say.
  logging_resource_adaptor(Upstream* upstream, std::string const& filename, logging_options options)
      : logging_resource_adaptor{checked(upstream), {make_file_sink(filename)}, options}
  {
    this->link_upstream(upstream);
  }

  /// Logs to `stream`, which must outlive the adaptor, as `options` say.
  logging_resource_adaptor(Upstream* upstream, std::ostream& stream, logging_options options)
      : logging_resource_adaptor{checked(upstream), {make_ostream_sink(stream)}, options}
  {
    this->link_upstream(upstream);
  }

  logging_resource_adaptor(logging_resource_adaptor&&) noexcept            = default;
  logging_resource_adaptor& operator=(logging_resource_adaptor&&) noexcept = default;
  logging_resource_adaptor(logging_resource_adaptor const&)                = delete;
  logging_resource_adaptor& operator=(logging_resource_adaptor const&)     = delete;
  ~logging_resource_adaptor() override                                     = default;

  [[nodiscard]] device_async_resource_ref get_upstream_resource() const noexcept
  {
    return upstream_;
  }

  /// Flushes every sink. Throws std::runtime_error when a sink failed (a full disk, a closed
  /// stream): the log is incomplete. The destructor says so on stderr instead.
  void flush() override { logger_->flush(); }

  /// "Thread,Time,Action,Pointer,Size,Stream" (with ",Frames" when it records call stacks)
  [[nodiscard]] std::string header() const { return logger_->header_line(); }

  /// The value of GPUMEM_LOG_FILE, else RMM_LOG_FILE; throws logic_error when both are unset.
  [[nodiscard]] static std::string get_default_filename() { return logging_default_filename(); }

 private:
  static device_async_resource_ref checked(Upstream* upstream)
  {
    return to_device_async_resource_ref_checked(upstream);
  }

  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    void* ptr = nullptr;
    try {
      ptr = gpumem::detail::async_allocate(upstream_, bytes, CUDA_ALLOCATION_ALIGNMENT, stream);
    } catch (...) {
      logger_->log("allocate failure", nullptr, bytes, stream.value());
      throw;
    }
    logger_->log("allocate", ptr, bytes, stream.value());
    return ptr;
  }

  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    logger_->log("free", ptr, bytes, stream.value());
    gpumem::detail::async_deallocate(upstream_, ptr, bytes, CUDA_ALLOCATION_ALIGNMENT, stream);
  }

  device_async_resource_ref upstream_;
  std::unique_ptr<detail::allocation_logger> logger_;  // in a box so the adaptor moves
};

static_assert(gpumem::detail::async_resource_with<logging_resource_adaptor<device_memory_resource>,
                                                  cuda::mr::device_accessible>);

}  // namespace gpumem::mr
