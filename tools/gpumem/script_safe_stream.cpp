// The <script>-safe JSON stream of the report page (see script_safe_stream.hpp).
#include "script_safe_stream.hpp"

#include <string_view>

namespace gpumem::tool {
namespace {

constexpr std::string_view line_separator      = "\xe2\x80\xa8";  // U+2028
constexpr std::string_view paragraph_separator = "\xe2\x80\xa9";  // U+2029

}  // namespace

void script_safe_buf::finish()
{
  for (char c : pending_) { put_escaped(c); }
  pending_.clear();
}

script_safe_buf::int_type script_safe_buf::overflow(int_type ch)
{
  if (!traits_type::eq_int_type(ch, traits_type::eof())) { put(traits_type::to_char_type(ch)); }
  return out_ ? traits_type::not_eof(ch) : traits_type::eof();
}

std::streamsize script_safe_buf::xsputn(char const* s, std::streamsize n)
{
  for (std::streamsize i = 0; i < n; ++i) { put(s[i]); }
  return out_ ? n : 0;
}

void script_safe_buf::put(char c)
{
  if (pending_.empty() && c != '\xe2') {  // the fast path: most bytes
    put_escaped(c);
    return;
  }
  pending_ += c;
  while (!pending_.empty()) {
    if (pending_ == line_separator || pending_ == paragraph_separator) {
      out_ << (pending_ == line_separator ? "\\u2028" : "\\u2029");
      pending_.clear();
    } else if (line_separator.starts_with(pending_)) {
      return;  // maybe one: wait for the next byte
    } else {   // the first byte starts none: write it, look at the rest again
      put_escaped(pending_.front());
      pending_.erase(0, 1);
    }
  }
}

void script_safe_buf::put_escaped(char c)
{
  switch (c) {
    case '<':
      out_ << "\\u003c";
      break;
    case '>':
      out_ << "\\u003e";
      break;
    case '&':
      out_ << "\\u0026";
      break;
    default:
      out_.put(c);
  }
}

}  // namespace gpumem::tool
