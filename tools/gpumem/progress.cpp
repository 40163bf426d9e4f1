// Progress bar on stderr.
#include "progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace gpumem::tool {

progress_bar::progress_bar(bool wanted) : enabled_{wanted && ::isatty(STDERR_FILENO) == 1} {}

void progress_bar::update(std::string const& label, std::size_t done, std::size_t total)
{
  if (!enabled_) { return; }
  auto const now = std::chrono::steady_clock::now();
  if (drawn_ && now - last_ < std::chrono::milliseconds{100} && done < total) { return; }
  last_  = now;
  drawn_ = true;
  // done may pass total (a file that grows while it is read): the bar stays full, not longer.
  double const frac =
      total == 0 || done >= total ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
  int constexpr width = 30;
  int const filled    = static_cast<int>(frac * width);
  std::string bar(static_cast<std::size_t>(width), ' ');
  for (int i = 0; i < filled; ++i) { bar[static_cast<std::size_t>(i)] = '='; }
  std::fprintf(stderr, "\r\033[K[%s] %3d%% %.60s", bar.c_str(), static_cast<int>(frac * 100),
               label.c_str());
  std::fflush(stderr);
}

void progress_bar::finish()
{
  if (enabled_ && drawn_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    drawn_ = false;
  }
}

}  // namespace gpumem::tool
