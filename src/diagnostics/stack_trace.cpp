// Stack capture (glibc <execinfo.h>) and printing (detail::symbolize) for detail::stack_trace.
#include <gpumem/detail/diagnostics/stack_trace.hpp>

#include <gpumem/detail/diagnostics/symbolizer.hpp>

#include <execinfo.h>

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <utility>

namespace gpumem::detail {

stack_trace::stack_trace(int max_frames)
{
  auto const kept = static_cast<std::size_t>(std::max(max_frames, 0));
  frames_.resize(kept + 2);  // room for this constructor's frame (and a sanitizer's)
  int const n = ::backtrace(frames_.data(), static_cast<int>(frames_.size()));
  frames_.resize(static_cast<std::size_t>(std::max(n, 0)));
  // The frames before the caller's are this constructor's own (and, under a sanitizer, the
  // backtrace() interceptor's): the first kept is the one that returns into the caller.
  auto const caller = std::find(frames_.begin(), frames_.end(), __builtin_return_address(0));
  frames_.erase(frames_.begin(), caller != frames_.end() ? caller : frames_.begin() + (n > 0));
  if (frames_.size() > kept) { frames_.resize(kept); }
}

std::vector<std::string> stack_trace::symbols() const
{
  std::vector<std::uintptr_t> calls;  // a return address minus one: inside the call instruction
  calls.reserve(frames_.size());
  for (void* f : frames_) { calls.push_back(reinterpret_cast<std::uintptr_t>(f) - 1); }
  std::vector<std::string> out;
  out.reserve(frames_.size());
  for (auto const& loc : symbolize(calls)) {
    for (auto& text : loc.texts()) { out.push_back(std::move(text)); }
  }
  return out;
}

std::string stack_trace::joined(char separator) const
{
  std::string out;
  bool first = true;
  for (auto frame : symbols()) {
    for (char& c : frame) {
      if (c == separator) { c = '/'; }
      if (c == '\n' || c == '\r') { c = ' '; }
    }
    if (!first) { out += separator; }
    out += frame;
    first = false;
  }
  return out;
}

std::ostream& operator<<(std::ostream& os, stack_trace const& trace)
{
  auto const symbols = trace.symbols();
  for (std::size_t i = 0; i < symbols.size(); ++i) {
    os << "  #" << i << " " << symbols[i] << "\n";
  }
  return os;
}

}  // namespace gpumem::detail
