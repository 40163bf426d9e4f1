// Stack capture (glibc <execinfo.h>) and printing (detail::symbolize) for detail::stack_trace.
#include <gpumem/detail/stack_trace.hpp>

#include <gpumem/detail/symbolizer.hpp>

#include <execinfo.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>

namespace gpumem::detail {

stack_trace::stack_trace(int max_frames) : frames_(static_cast<std::size_t>(max_frames) + 1)
{
  int const n = ::backtrace(frames_.data(), max_frames + 1);
  frames_.resize(static_cast<std::size_t>(n > 0 ? n : 0));
  if (!frames_.empty()) { frames_.erase(frames_.begin()); }  // this constructor's own frame
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
