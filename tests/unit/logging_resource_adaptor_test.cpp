// logging_resource_adaptor: exact CSV lines, sinks, GPUMEM_LOG_FILE, failures, flushing.
#include "adaptor_test_support.hpp"

#include <gpumem/detail/diagnostics/allocation_logger.hpp>
#include <gpumem/detail/diagnostics/child_process.hpp>
#include <gpumem/mr/logging_resource_adaptor.hpp>
#include <gpumem/trace/trace_reader.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

using logging      = mr::logging_resource_adaptor<mr::cuda_memory_resource>;
using logging_test = host_upstream;

std::vector<std::string> lines_of(std::string const& text)
{
  std::vector<std::string> out;
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);) { out.push_back(line); }
  return out;
}

std::vector<std::string> fields_of(std::string const& line)
{
  std::vector<std::string> out;
  std::istringstream in{line};
  for (std::string f; std::getline(in, f, ',');) { out.push_back(f); }
  return out;
}

long long now_us()
{
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string hex(void const* p)
{
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx",
                static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(p)));
  return buf;
}

std::string temp_path(char const* name)
{
  return (std::filesystem::temp_directory_path() /
          (std::string{name} + "." + std::to_string(::getpid()) + ".csv"))
      .string();
}

std::string slurp(std::string const& path)
{
  std::ifstream in{path};
  return {std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{}};
}

TEST_F(logging_test, WritesHeaderAndExactLines)
{
  std::ostringstream out;
  logging mr{&base, out};
  EXPECT_EQ(mr.header(), "Thread,Time,Action,Pointer,Size,Stream");
  auto const s      = rt.create_stream();
  auto const before = now_us();
  void* p           = mr.allocate(1000, s);
  mr.deallocate(p, 1000, s);
  void* q = mr.allocate(256);
  mr.deallocate(q, 256);
  auto const after = now_us();
  auto const lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 5u) << out.str();
  EXPECT_EQ(lines[0], "Thread,Time,Action,Pointer,Size,Stream");
  std::string const stream = std::to_string(reinterpret_cast<std::uintptr_t>(s));
  std::vector<std::vector<std::string>> const expected = {
      {"0", "", "allocate", hex(p), "1000", stream},
      {"0", "", "free", hex(p), "1000", stream},
      {"0", "", "allocate", hex(q), "256", "0"},
      {"0", "", "free", hex(q), "256", "0"}};
  long long last = before;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    auto f = fields_of(lines[i + 1]);
    ASSERT_EQ(f.size(), 6u) << lines[i + 1];
    long long const t = std::stoll(f[1]);
    EXPECT_GE(t, last) << lines[i + 1];
    EXPECT_LE(t, after) << lines[i + 1];
    last = t;
    f[1].clear();
    EXPECT_EQ(f, expected[i]) << lines[i + 1];
  }
}

TEST_F(logging_test, FailedAllocationIsLoggedAndRethrown)
{
  std::ostringstream out;
  logging mr{&base, out};
  rt.fail_next_allocations(1);
  EXPECT_THROW((void)mr.allocate(4096), gpumem::out_of_memory);
  auto const lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 2u);
  auto f = fields_of(lines[1]);
  ASSERT_EQ(f.size(), 6u);
  EXPECT_EQ(f[2], "allocate failure");
  EXPECT_EQ(f[3], "0x0");
  EXPECT_EQ(f[4], "4096");
}

TEST_F(logging_test, ThreadsAreNumberedInOrderOfFirstUse)
{
  std::ostringstream out;
  logging mr{&base, out};
  void* p = mr.allocate(256);
  std::thread{[&] { mr.deallocate(p, 256); }}.join();
  void* q = mr.allocate(256);
  mr.deallocate(q, 256);
  auto const lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(fields_of(lines[1])[0], "0");
  EXPECT_EQ(fields_of(lines[2])[0], "1");
  EXPECT_EQ(fields_of(lines[3])[0], "0");
}

TEST_F(logging_test, SeveralSinksGetTheSameLines)
{
  auto a = std::make_shared<std::ostringstream>();
  auto b = std::make_shared<std::ostringstream>();
  logging mr{&base, {a, b}};
  void* p = mr.allocate(512);
  mr.deallocate(p, 512);
  EXPECT_EQ(lines_of(a->str()).size(), 3u);
  EXPECT_EQ(a->str(), b->str());
  EXPECT_THROW((logging{&base, {a, nullptr}}), gpumem::logic_error);
  EXPECT_THROW((logging{static_cast<mr::cuda_memory_resource*>(nullptr), *a}), gpumem::logic_error);
}

TEST_F(logging_test, DefaultFileNameComesFromTheEnvironment)
{
  ::unsetenv("GPUMEM_LOG_FILE");
  ::unsetenv("RMM_LOG_FILE");
  try {
    logging mr{&base};
    FAIL() << "no error without GPUMEM_LOG_FILE";
  } catch (gpumem::logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("GPUMEM_LOG_FILE"), std::string::npos) << e.what();
  }
  auto const path = temp_path("gpumem_env_log");
  ::setenv("GPUMEM_LOG_FILE", path.c_str(), 1);
  EXPECT_EQ(logging::get_default_filename(), path);
  {
    logging mr{device_async_resource_ref{base}};
    void* p = mr.allocate(256);
    mr.deallocate(p, 256);
  }
  ::unsetenv("GPUMEM_LOG_FILE");
  EXPECT_EQ(lines_of(slurp(path)).size(), 3u);
  std::remove(path.c_str());
  EXPECT_THROW((logging{&base, std::string{"/nonexistent-dir/x.csv"}}), std::runtime_error);
}

TEST_F(logging_test, RmmLogFileIsHonouredWhenOursIsUnset)
{
  ::unsetenv("GPUMEM_LOG_FILE");
  auto const rmm_path = temp_path("gpumem_rmm_env_log");
  ::setenv("RMM_LOG_FILE", rmm_path.c_str(), 1);
  EXPECT_EQ(logging::get_default_filename(), rmm_path);
  {
    logging mr{&base};
    mr.deallocate(mr.allocate(512), 512);
  }
  EXPECT_EQ(lines_of(slurp(rmm_path)).size(), 3u);
  std::remove(rmm_path.c_str());
  auto const ours = temp_path("gpumem_ours_env_log");
  ::setenv("GPUMEM_LOG_FILE", ours.c_str(), 1);
  EXPECT_EQ(logging::get_default_filename(), ours);  // ours first when both are set
  ::unsetenv("GPUMEM_LOG_FILE");
  ::unsetenv("RMM_LOG_FILE");
  try {
    (void)logging::get_default_filename();
    FAIL() << "no error with neither variable set";
  } catch (gpumem::logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("RMM_LOG_FILE"), std::string::npos) << e.what();
  }
}

TEST_F(logging_test, AFileThatCannotBeOpenedIsARuntimeErrorNamingIt)
{
  std::string const path = "/nonexistent-gpumem-dir/log.csv";
  try {
    logging mr{device_async_resource_ref{base}, path};
    FAIL() << "opened " << path;
  } catch (std::runtime_error const& e) {
    EXPECT_NE(std::string{e.what()}.find(path), std::string::npos) << e.what();
  }
  void* p = base.allocate(256);  // the upstream is untouched
  base.deallocate(p, 256);
  EXPECT_EQ(rt.live_allocations(), 0u);
}

TEST_F(logging_test, RefAndOstreamConstructorLogsToTheStream)
{
  std::ostringstream out;
  logging mr{device_async_resource_ref{base}, out};
  EXPECT_TRUE(mr.get_upstream_resource() == device_async_resource_ref{base});
  void* p = mr.allocate(1000);
  mr.deallocate(p, 1000);
  mr.flush();
  auto const lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], mr.header());
  EXPECT_EQ(fields_of(lines[1])[2], "allocate");
  EXPECT_EQ(fields_of(lines[2])[2], "free");
}

TEST_F(logging_test, AutoFlushAndFlushMakeLinesVisible)
{
  auto const path = temp_path("gpumem_flush_log");
  {
    logging mr{&base, path, true};
    void* p = mr.allocate(256);
    EXPECT_EQ(lines_of(slurp(path)).size(), 2u);  // header and the allocate, already on disk
    mr.deallocate(p, 256);
    EXPECT_EQ(lines_of(slurp(path)).size(), 3u);
  }
  {
    logging mr{&base, path, false};  // truncates
    void* p = mr.allocate(256);
    mr.flush();
    EXPECT_EQ(lines_of(slurp(path)).size(), 2u);
    logging moved{std::move(mr)};
    moved.deallocate(p, 256);
    moved.flush();
    EXPECT_EQ(lines_of(slurp(path)).size(), 3u);
  }
  std::remove(path.c_str());
}

// Call stacks are opt-in: the header names the Frames column, allocates carry their stack (several
// frames joined by '|'), frees none; the trace reader reads them back.
TEST_F(logging_test, StacksAreOptInAndReadBackAsFrames)
{
  auto const path = temp_path("stacks");
  {
    logging mr{&base, path, mr::logging_options{.stacks = true}};
    EXPECT_EQ(mr.header(), "Thread,Time,Action,Pointer,Size,Stream,Frames");
    void* p = mr.allocate(1000);
    mr.deallocate(p, 1000);
  }
  auto const events = trace::read_all(path);
  std::remove(path.c_str());
  ASSERT_EQ(events.size(), 2U);
  EXPECT_EQ(events[0].act, trace::action::allocate);
  EXPECT_EQ(events[0].size, 1000U);
  EXPECT_NE(events[0].frames.find('|'), std::string::npos) << events[0].frames;
  EXPECT_EQ(events[0].frames.find('\n'), std::string::npos);
  // The test binary has debug information: its frames read "function (file:line)".
  if (detail::run_program({"addr2line", "--version"})) {
    EXPECT_NE(events[0].frames.find("logging_resource_adaptor_test.cpp:"), std::string::npos)
        << events[0].frames;
  }
  EXPECT_EQ(events[1].act, trace::action::free);
  EXPECT_EQ(events[1].frames, "");
}

TEST_F(logging_test, WithoutStacksNothingIsCapturedAndTheLogHasSixColumns)
{
  std::ostringstream out;
  logging mr{&base, out, mr::logging_options{.auto_flush = true}};
  void* p = mr.allocate(64);
  mr.deallocate(p, 64);
  auto const lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 3U);
  EXPECT_EQ(lines[0], "Thread,Time,Action,Pointer,Size,Stream");
  EXPECT_EQ(fields_of(lines[1]).size(), 6U);
}

// A caller that knows the stack (gpumem.torch's Python frames) gives it: written as given
// (CSV-quoted when needed), nothing captured; a logger without the Frames column ignores it.
TEST(allocation_logger, LogsTheFramesItIsGiven)
{
  auto out = std::make_shared<std::ostringstream>();
  {
    detail::allocation_logger log{{out}, false, true};
    int x{};
    log.log("allocate", &x, 16, nullptr, "f (a.py:1)|<module> (b.py:2)");
    log.log("allocate", &x, 32, nullptr, "g<int, char> (c.py:3)");
    log.log("free", &x, 16, nullptr, {});
  }
  auto const lines = lines_of(out->str());
  ASSERT_EQ(lines.size(), 4U);
  EXPECT_EQ(lines[0], "Thread,Time,Action,Pointer,Size,Stream,Frames");
  EXPECT_TRUE(lines[1].ends_with(",16,0,f (a.py:1)|<module> (b.py:2)")) << lines[1];
  EXPECT_TRUE(lines[2].ends_with(",32,0,\"g<int, char> (c.py:3)\"")) << lines[2];
  EXPECT_TRUE(lines[3].ends_with(",16,0,")) << lines[3];

  auto plain = std::make_shared<std::ostringstream>();
  {
    detail::allocation_logger log{{plain}, false};
    int x{};
    log.log("allocate", &x, 16, nullptr, "f (a.py:1)");
  }
  auto const six = lines_of(plain->str());
  ASSERT_EQ(six.size(), 2U);
  EXPECT_EQ(fields_of(six[1]).size(), 6U) << six[1];
}

}  // namespace
}  // namespace gpumem::test
