// libFuzzer target: the CSV trace reader on any bytes. A malformed trace must end in trace_error
// (naming a line), never a crash, a hang or an out-of-range read; a trace that reads must read
// the same with a tiny buffer (lines crossing buffer refills).
#include <gpumem/trace/trace_reader.hpp>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

/// Every event of `path` read with `buffer_bytes`, or nothing and `failed` when it is malformed.
std::vector<gpumem::trace::event> read(std::string const& path, std::size_t buffer_bytes,
                                       bool& failed)
{
  std::vector<gpumem::trace::event> out;
  failed = false;
  try {
    gpumem::trace::trace_reader r{path, {.buffer_bytes = buffer_bytes}};
    gpumem::trace::event e;
    while (r.next(e)) { out.push_back(e); }
  } catch (gpumem::trace::trace_error const&) {
    failed = true;
  }
  return out;
}

bool same(gpumem::trace::event const& a, gpumem::trace::event const& b)
{
  return a.thread == b.thread && a.time == b.time && a.act == b.act && a.pointer == b.pointer &&
         a.size == b.size && a.stream == b.stream && a.line == b.line && a.frames == b.frames;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size)
{
  // One file for every input, removed when the fuzzer exits (its static is destroyed then).
  struct scratch_file {
    std::string path;
    scratch_file()
    {
      char name[]  = "/tmp/gpumem-fuzz-trace-XXXXXX";
      int const fd = ::mkstemp(name);
      if (fd < 0) { std::abort(); }
      ::close(fd);
      path = name;
    }
    scratch_file(scratch_file const&)            = delete;
    scratch_file& operator=(scratch_file const&) = delete;
    ~scratch_file() { ::unlink(path.c_str()); }
  };
  static scratch_file const scratch;
  auto const& path = scratch.path;
  std::FILE* f     = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) {
    std::abort();
  }
  bool failed_big = false, failed_small = false;
  auto const big   = read(path, std::size_t{1} << 20, failed_big);
  auto const small = read(path, 256, failed_small);
  if (failed_big || failed_small) { return 0; }  // a short buffer may refuse long lines
  if (big.size() != small.size()) { std::abort(); }
  for (std::size_t i = 0; i < big.size(); ++i) {
    if (!same(big[i], small[i])) { std::abort(); }
  }
  return 0;
}
