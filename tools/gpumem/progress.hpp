// tools/gpumem/progress.hpp — a progress bar on stderr, drawn only when stderr is a terminal and
// at most ten times a second.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace gpumem::tool {

class progress_bar {
 public:
  /// Enabled when `wanted` and stderr is a terminal.
  explicit progress_bar(bool wanted);
  ~progress_bar() { finish(); }
  progress_bar(progress_bar const&)            = delete;
  progress_bar& operator=(progress_bar const&) = delete;

  void update(std::string const& label, std::size_t done, std::size_t total);
  /// Clears the bar's line.
  void finish();

 private:
  bool enabled_{};
  bool drawn_{};
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace gpumem::tool
