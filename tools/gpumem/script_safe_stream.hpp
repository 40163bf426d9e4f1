// tools/gpumem/script_safe_stream.hpp — JSON written into a page's <script> element as it is
// produced: '<', '>', '&', U+2028 and U+2029 become \u escapes on the way through. In JSON these
// characters can stand only inside strings, where the escape means the same character, so the
// embedded data parses to exactly what results.json holds; and no text from a trace can end the
// element ("</script"), open a comment or a nested script ("<!--", "<script") or, for old
// parsers, break a line. Nothing is buffered beyond the first bytes of a possible U+2028/2029.
#pragma once

#include <ostream>
#include <streambuf>
#include <string>

namespace gpumem::tool {

class script_safe_buf : public std::streambuf {
 public:
  explicit script_safe_buf(std::ostream& out) : out_{out} {}
  /// Writes what is held back (an incomplete sequence, as it is). Call at the end of the JSON.
  void finish();

 protected:
  int_type overflow(int_type ch) override;
  std::streamsize xsputn(char const* s, std::streamsize n) override;

 private:
  void put(char c);
  void put_escaped(char c);

  std::ostream& out_;
  /// A prefix of U+2028/U+2029 in UTF-8 ("\xe2" or "\xe2\x80") not yet written; else empty.
  std::string pending_;
};

}  // namespace gpumem::tool
