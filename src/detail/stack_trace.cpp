// Stack capture and printing for detail::stack_trace (glibc <execinfo.h>).
#include <gpumem/detail/stack_trace.hpp>

#include <execinfo.h>

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <ostream>
#include <string>

namespace gpumem::detail {

stack_trace::stack_trace(int max_frames) : frames_(static_cast<std::size_t>(max_frames) + 1)
{
  int const n = ::backtrace(frames_.data(), max_frames + 1);
  frames_.resize(static_cast<std::size_t>(n > 0 ? n : 0));
  if (!frames_.empty()) { frames_.erase(frames_.begin()); }  // this constructor's own frame
}

namespace {

/// "module(_ZN3foo3barEv+0x1c) [0x...]" -> "module(foo::bar()+0x1c) [0x...]".
std::string demangled(char const* symbol)
{
  std::string line{symbol};
  auto const open = line.find('(');
  auto const plus = line.find('+', open == std::string::npos ? 0 : open);
  if (open == std::string::npos || plus == std::string::npos || plus == open + 1) { return line; }
  std::string const mangled = line.substr(open + 1, plus - open - 1);
  int status                = 0;
  std::unique_ptr<char, decltype(&std::free)> name{
      abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), &std::free};
  if (status != 0 || !name) { return line; }
  return line.substr(0, open + 1) + name.get() + line.substr(plus);
}

}  // namespace

std::string stack_trace::joined(char separator) const
{
  auto const n = static_cast<int>(frames_.size());
  std::unique_ptr<char*, decltype(&std::free)> symbols{::backtrace_symbols(frames_.data(), n),
                                                       &std::free};
  std::string out;
  for (int i = 0; i < n; ++i) {
    std::string frame = symbols ? demangled(symbols.get()[i]) : "?";
    for (char& c : frame) {
      if (c == separator) { c = '/'; }
      if (c == '\n' || c == '\r') { c = ' '; }
    }
    if (i != 0) { out += separator; }
    out += frame;
  }
  return out;
}

std::ostream& operator<<(std::ostream& os, stack_trace const& trace)
{
  auto const n = static_cast<int>(trace.frames_.size());
  std::unique_ptr<char*, decltype(&std::free)> symbols{::backtrace_symbols(trace.frames_.data(), n),
                                                       &std::free};
  for (int i = 0; i < n; ++i) {
    os << "  #" << i << " ";
    if (symbols) {
      os << demangled(symbols.get()[i]);
    } else {
      os << trace.frames_[static_cast<std::size_t>(i)];
    }
    os << "\n";
  }
  return os;
}

}  // namespace gpumem::detail
