// Streaming CSV trace reader: one fixed buffer, hand-written field parsers.
#include <gpumem/detail/format.hpp>
#include <gpumem/trace/trace_reader.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <string_view>

namespace gpumem::trace {
namespace {

constexpr std::string_view header_text        = "Thread,Time,Action,Pointer,Size,Stream";
constexpr std::string_view frames_header_text = "Thread,Time,Action,Pointer,Size,Stream,Frames";

/// A line being parsed: the cursor, the end, and where to report problems.
struct cursor {
  char const* p;
  char const* end;
  std::string const& file;
  std::size_t line;
  char const* field_start{p};  ///< where the field being read begins (shown whole on failure)

  /// The most of a field a message shows; a longer one ends with "...".
  static constexpr std::size_t shown_bytes = 80;

  [[noreturn]] void fail(std::string const& expected) const
  {
    auto const* from = field_start <= p ? field_start : p;
    auto const* stop = static_cast<char const*>(std::memchr(p, ',', end - p));
    std::string_view found{from, static_cast<std::size_t>((stop ? stop : end) - from)};
    auto const cut = found.size() > shown_bytes;
    throw trace_error{
        file, line,
        detail::format("expected ", expected, ", found '",
                       found.empty() ? std::string_view{"<nothing>"} : found.substr(0, shown_bytes),
                       cut ? "...' (" : "'", cut ? detail::format(found.size(), " bytes)") : "")};
  }

  void comma(char const* field)
  {
    if (p == end || *p != ',') {
      fail(detail::format("',' before the ", field,
                          " column (6 columns: Thread,Time,Action,Pointer,Size,Stream)"));
    }
    field_start = ++p;
  }

  /// A decimal number; `whole`: the field holds nothing after it (Time may go on: 12.5).
  std::uint64_t decimal(char const* field, bool whole = true)
  {
    char const* start = p;
    std::uint64_t v   = 0;
    while (p != end && static_cast<unsigned>(*p - '0') < 10U) {
      v = v * 10 + static_cast<std::uint64_t>(*p - '0');
      ++p;
    }
    if (p == start || (whole && p != end && *p != ',')) {
      fail(detail::format("a decimal ", field));
    }
    if (p - start > 19) { v = checked_decimal(start, field); }  // may not fit: slow path
    return v;
  }

  /// Re-reads a long number with overflow checks.
  std::uint64_t checked_decimal(char const* from, char const* field)
  {
    std::uint64_t v = 0;
    for (char const* q = from; q != p; ++q) {
      if (__builtin_mul_overflow(v, 10U, &v) ||
          __builtin_add_overflow(v, static_cast<std::uint64_t>(*q - '0'), &v)) {
        p = from;
        fail(detail::format(field, " below 2^64"));
      }
    }
    return v;
  }

  std::uint64_t hex_digits(char const* field)
  {
    static constexpr auto table = [] {
      std::array<std::uint8_t, 256> t{};
      t.fill(0xff);
      for (int i = 0; i < 10; ++i) { t['0' + i] = static_cast<std::uint8_t>(i); }
      for (int i = 0; i < 6; ++i) { t['a' + i] = t['A' + i] = static_cast<std::uint8_t>(10 + i); }
      return t;
    }();
    char const* start = p;
    std::uint64_t v   = 0;
    for (std::uint8_t d = 0; p != end && (d = table[static_cast<unsigned char>(*p)]) != 0xff; ++p) {
      v = (v << 4) | d;
    }
    if (p == start) { fail(detail::format("hex digits of the ", field, " after 0x")); }
    if (p - start > 16) { p = start, fail(detail::format(field, " of at most 16 hex digits")); }
    return v;
  }

  /// `0x…` hex or decimal (pointers and stream handles).
  std::uint64_t handle(char const* field)
  {
    if (end - p > 2 && p[0] == '0' && (p[1] | 0x20) == 'x') {
      p += 2;
      return hex_digits(field);
    }
    if (p == end || static_cast<unsigned>(*p - '0') >= 10U) {
      fail(detail::format("a ", field, " (0x-prefixed hex or decimal)"));
    }
    return decimal(field);
  }

  /// Leading integer of the Time column; the rest (fraction, clock separators) is skipped.
  std::uint64_t time()
  {
    std::uint64_t v = decimal("Time", false);
    while (p != end && (static_cast<unsigned>(*p - '0') < 10U || *p == '.' || *p == ':')) { ++p; }
    return v;
  }

  action act()
  {
    auto const rest = static_cast<std::size_t>(end - p);
    auto starts     = [&](std::string_view w) {
      return rest >= w.size() && std::memcmp(p, w.data(), w.size()) == 0 &&
             (rest == w.size() || p[w.size()] == ',');
    };
    if (starts("allocate")) { return p += 8, action::allocate; }
    if (starts("free")) { return p += 4, action::free; }
    if (starts("allocate failure")) { return p += 16, action::allocate_failure; }
    if (starts("allocate_failure")) { return p += 16, action::allocate_failure; }
    fail("Action 'allocate', 'free' or 'allocate failure'");
  }

  /// The Frames column: a CSV field, quoted ("" inside for a quote) or the rest of the line.
  void frames(std::string& out)
  {
    out.clear();
    if (p == end) { return; }  // a row may leave the column out
    comma("Frames");
    if (p == end || *p != '"') {
      out.assign(p, end);
      p = end;
      return;
    }
    for (++p;; ++p) {
      if (p == end) { fail("a closing '\"' of the quoted Frames column"); }
      if (*p == '"') {
        if (p + 1 != end && p[1] == '"') {
          ++p;
        } else {
          ++p;
          break;
        }
      }
      out += *p;
    }
  }

  void finish()
  {
    if (p != end) {
      field_start = p;
      fail(
          "end of line after the Stream column (6 columns: Thread,Time,Action,Pointer,Size,"
          "Stream)");
    }
  }
};

}  // namespace

char const* to_string(action a) noexcept
{
  switch (a) {
    case action::allocate:
      return "allocate";
    case action::free:
      return "free";
    case action::allocate_failure:
      return "allocate failure";
  }
  return "?";
}

trace_error::trace_error(std::string const& file, std::size_t line, std::string const& what)
    : std::runtime_error{line == 0 ? detail::format(file, ": ", what)
                                   : detail::format(file, ":", line, ": ", what)},
      file_{file},
      line_{line}
{
}

trace_reader::trace_reader(std::string path, trace_reader_options options)
    : path_{std::move(path)}, buffer_(std::max<std::size_t>(options.buffer_bytes, 256))
{
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    throw trace_error{
        path_, 0,
        detail::format("cannot open the trace: ", std::generic_category().message(errno),
                       " (give a CSV written by logging_resource_adaptor or by "
                       "`gpumem convert`)")};
  }
  struct stat st {};
  if (::fstat(fd_, &st) == 0) { file_bytes_ = static_cast<std::size_t>(st.st_size); }
}

trace_reader::~trace_reader()
{
  if (fd_ >= 0) { ::close(fd_); }
}

void trace_reader::rewind()
{
  ::lseek(fd_, 0, SEEK_SET);
  pos_ = limit_ = line_ = consumed_ = truncated_line_ = 0;
  eof_ = terminated_ = frames_column_ = false;
}

bool trace_reader::refill()
{
  std::memmove(buffer_.data(), buffer_.data() + pos_, limit_ - pos_);
  limit_ -= pos_;
  pos_ = 0;
  while (!eof_ && limit_ < buffer_.size()) {
    auto const n = ::read(fd_, buffer_.data() + limit_, buffer_.size() - limit_);
    if (n < 0 && errno == EINTR) { continue; }
    if (n < 0) {
      throw trace_error{path_, line_ + 1,
                        detail::format("read failed: ", std::generic_category().message(errno))};
    }
    if (n == 0) { eof_ = true; }
    limit_ += static_cast<std::size_t>(n);
  }
  return limit_ > 0;
}

bool trace_reader::next_line(char const*& begin, char const*& end)
{
  for (;;) {
    char const* base = buffer_.data();
    auto const* nl   = static_cast<char const*>(std::memchr(base + pos_, '\n', limit_ - pos_));
    if (nl == nullptr && !eof_) {
      if (pos_ == 0 && limit_ == buffer_.size()) {
        throw trace_error{path_, line_ + 1,
                          detail::format("a line shorter than ", buffer_.size(),
                                         " bytes (is this a CSV trace?)")};
      }
      refill();
      continue;
    }
    if (nl == nullptr && pos_ == limit_) { return false; }
    begin       = base + pos_;
    end         = nl ? nl : base + limit_;
    terminated_ = nl != nullptr;
    consumed_ += static_cast<std::size_t>(end - begin) + (nl ? 1 : 0);
    pos_ = static_cast<std::size_t>(end - base) + (nl ? 1 : 0);
    ++line_;
    if (end != begin && end[-1] == '\r') { --end; }
    return true;
  }
}

void trace_reader::parse(char const* begin, char const* end, event& out) const
{
  cursor c{begin, end, path_, line_};
  out.thread = c.decimal("Thread");
  c.comma("Time");
  out.time = c.time();
  c.comma("Action");
  out.act = c.act();
  c.comma("Pointer");
  out.pointer = c.handle("Pointer");
  c.comma("Size");
  out.size = c.decimal("Size");
  c.comma("Stream");
  out.stream = c.handle("Stream");
  if (frames_column_) {
    c.frames(out.frames);
  } else if (!out.frames.empty()) {
    out.frames.clear();
  }
  c.finish();
  out.line = line_;
}

bool trace_reader::next(event& out)
{
  char const* begin = nullptr;
  char const* end   = nullptr;
  for (;;) {
    if (!next_line(begin, end)) { return false; }
    if (begin == end) { continue; }
    if (line_ == 1 && (*begin < '0' || *begin > '9')) {
      std::string_view const header{begin, static_cast<std::size_t>(end - begin)};
      if (header != header_text && header != frames_header_text) {
        cursor{begin, end, path_, line_}.fail(
            detail::format("the header '", header_text, "' (or with ',Frames') or a first event"));
      }
      frames_column_ = header == frames_header_text;
      continue;
    }
    if (terminated_) {
      parse(begin, end, out);
      return true;
    }
    try {  // the last line, without a newline: a cut-off line ends the trace
      parse(begin, end, out);
      return true;
    } catch (trace_error const&) {
      truncated_line_ = line_;
      return false;
    }
  }
}

std::size_t trace_reader::read(std::span<event> out)
{
  std::size_t n = 0;
  while (n < out.size() && next(out[n])) { ++n; }
  return n;
}

std::vector<event> read_all(std::string const& path)
{
  trace_reader reader{path};
  std::vector<event> events;
  event e;
  while (reader.next(e)) { events.push_back(e); }
  return events;
}

}  // namespace gpumem::trace
