// gpumem/trace/compact_trace.hpp — a trace after profiling: fixed-size binary events in an
// anonymous temporary file, with pointers replaced by dense slot numbers (a slot is reused after
// its block is freed), so that each replay reads 24 bytes per event and indexes an array instead
// of parsing text and hashing pointers. Anomalies are already resolved (see replay.hpp): an
// allocate into an occupied slot means "free the stale block first"; skipped rows are no-ops.
//
// Memory: a fixed write/read buffer; the events live in the file (page cache), whatever the length.
// The file lives in $TMPDIR (else /tmp) and has no name: it is unlinked when created, so it goes
// away with the object (or the process), whatever happens.
// Errors: std::runtime_error when the temporary file cannot be created, written or read (naming
// the folder).
// Thread safety: none; one reader at a time (rewind() restarts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <vector>

namespace gpumem::trace {

struct compact_event {
  enum kind : std::uint8_t { allocate, free, no_op };
  std::uint64_t size{};    ///< bytes (for free: the size it was allocated with)
  std::uint32_t slot{};    ///< dense id of the block
  std::uint32_t line{};    ///< line in the trace file (saturates at 2^32-1)
  std::uint16_t stream{};  ///< index into trace_profile::streams
  std::uint16_t thread{};  ///< index into trace_profile::threads
  kind act{no_op};
  std::uint8_t padding_[3]{};  ///< explicit, so that no uninitialized byte reaches the file
};
static_assert(sizeof(compact_event) == 24);

class compact_trace {
 public:
  compact_trace();
  ~compact_trace();
  compact_trace(compact_trace const&)            = delete;
  compact_trace& operator=(compact_trace const&) = delete;

  void append(compact_event const& e)
  {
    if (buffer_.size() == capacity) { spill(); }
    buffer_.push_back(e);
  }
  /// Appends a run of events (written straight through when the buffer is empty).
  void append(std::span<compact_event const> events);
  /// Ends writing; reading starts at the first event.
  void finish();
  /// Up to out.size() events; 0 at the end.
  std::size_t read(std::span<compact_event> out);
  void rewind();
  [[nodiscard]] std::uint64_t size() const noexcept { return count_; }

 private:
  static constexpr std::size_t capacity = std::size_t{1} << 15;
  void spill();

  std::FILE* file_{};
  std::vector<compact_event> buffer_;
  std::uint64_t count_{};
};

}  // namespace gpumem::trace
