// Samples of values over the events of a trace (src/replay only): each sample is the maximum of
// each value over a span of events, and spans double as the trace goes on, so that a trace of any
// length gives at least `points` samples (when it has that many events) and fewer than twice as
// many. The replayer (live and held bytes) and the profiler (live bytes and time) sample with the
// same spans, so their samples fall on the same events.
//
// Invariants: points() holds one sample per span_ events added (after doubling), fewer than
// 2 * points; each sample's event is the 0-based index of the last event of its span.
// Thread safety: none.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpumem::trace {

/// `N` values per event; a sample is {event, max of value 0, ..., max of value N-1}.
template <std::size_t N>
class timeline_sampler {
 public:
  using sample = std::array<std::uint64_t, N + 1>;

  explicit timeline_sampler(std::size_t points) : points_{std::max<std::size_t>(points, 1)}
  {
    samples_.reserve(2 * points_);
  }

  /// The values after one more event.
  void add(std::array<std::uint64_t, N> const& values)
  {
    for (std::size_t i = 0; i < N; ++i) { bucket_[i] = std::max(bucket_[i], values[i]); }
    ++events_;
    if (--countdown_ == 0) { close(); }
  }

  /// Closes the last, partial span (idempotent).
  void finish()
  {
    if (countdown_ != span_) { close(); }
  }

  [[nodiscard]] std::vector<sample> const& samples() const noexcept { return samples_; }

 private:
  void close()
  {
    sample s{};
    s[0] = events_ - 1;
    std::copy(bucket_.begin(), bucket_.end(), s.begin() + 1);
    samples_.push_back(s);
    bucket_ = {};
    if (samples_.size() >= 2 * points_) {  // twice too many: merge pairs, double the span
      for (std::size_t i = 0; i < samples_.size() / 2; ++i) {
        auto const& a = samples_[2 * i];
        auto const& b = samples_[2 * i + 1];
        sample m{};
        m[0] = b[0];
        for (std::size_t v = 1; v <= N; ++v) { m[v] = std::max(a[v], b[v]); }
        samples_[i] = m;
      }
      samples_.resize(samples_.size() / 2);
      span_ *= 2;
    }
    countdown_ = span_;
  }

  std::size_t points_;
  std::vector<sample> samples_;
  std::array<std::uint64_t, N> bucket_{};
  std::uint64_t events_{};
  std::uint64_t span_{1};
  std::uint64_t countdown_{1};
};

}  // namespace gpumem::trace
