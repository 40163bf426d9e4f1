// Native stacks named with file and line (detail::symbolize), the fallback without debug
// information, and run_program, which starts addr2line without a shell.
#include <gpumem/detail/diagnostics/child_process.hpp>
#include <gpumem/detail/diagnostics/stack_trace.hpp>
#include <gpumem/detail/diagnostics/symbolizer.hpp>

#include <gnu/libc-version.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace gpumem::detail {
namespace {

bool addr2line_installed()
{
  return run_program({"addr2line", "--version"}).has_value();
}

[[gnu::noinline]] stack_trace captured_here()
{
  stack_trace t;                  // the line this test looks for
  asm volatile("" ::: "memory");  // keeps the call from becoming a tail call
  return t;
}
constexpr unsigned capture_line = __LINE__ - 4;

[[gnu::always_inline]] inline stack_trace inlined_caller()
{
  return captured_here();
}
constexpr unsigned inlined_call_line = __LINE__ - 2;

TEST(run_program, PassesEachArgumentAsItIsWithoutAShell)
{
  std::string const odd = "a b 'q' \"d\" $HOME `x` ; | * \\ \n next line";
  auto const out        = run_program({"printf", "%s", odd});
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, odd);
}

TEST(run_program, AProgramThatFailsOrIsMissingGivesNothing)
{
  EXPECT_FALSE(run_program({"false"}).has_value());
  EXPECT_FALSE(run_program({"gpumem-no-such-program-here"}).has_value());
  EXPECT_FALSE(run_program({}).has_value());
  EXPECT_EQ(run_program({"true"}), std::string{});
}

// Whether this test build has debug information (tests/CMakeLists.txt says; every build of
// scripts/test.sh has it).
#ifndef GPUMEM_TESTS_DEBUG_INFO
#define GPUMEM_TESTS_DEBUG_INFO 1
#endif
#define GPUMEM_SKIP_WITHOUT_LINES()                                                            \
  if (!addr2line_installed()) { GTEST_SKIP() << "addr2line (binutils) is not installed"; }     \
  if (GPUMEM_TESTS_DEBUG_INFO == 0) {                                                          \
    GTEST_SKIP() << "this test build has no debug information (-g): no file and line to read"; \
  }

// In a build with debug information (-g), this binary's frame is named with this file and the
// line of the capture.
TEST(stack_trace, AFrameOfThisBinaryShowsItsFileAndLine)
{
  GPUMEM_SKIP_WITHOUT_LINES();
  auto const t = captured_here();
  ASSERT_FALSE(t.symbols().empty());
  auto const expected = "stack_trace_test.cpp:" + std::to_string(capture_line) + ")";
  EXPECT_NE(t.symbols().front().find(expected), std::string::npos) << t.symbols().front();
  EXPECT_NE(t.symbols().front().find("captured_here"), std::string::npos) << t.symbols().front();
  // The caller's frame (this test) is named too.
  ASSERT_GT(t.symbols().size(), 1U);
  EXPECT_NE(t.symbols()[1].find("stack_trace_test.cpp:"), std::string::npos) << t.symbols()[1];

  auto const joined = t.joined('|');
  EXPECT_EQ(joined.find('\n'), std::string::npos);
  EXPECT_EQ(joined.rfind(t.symbols().front(), 0), 0U) << joined;
  std::ostringstream printed;
  printed << t;
  EXPECT_EQ(printed.str().rfind("  #0 " + t.symbols().front() + "\n", 0), 0U) << printed.str();
}

// The return address into inlined code gives a frame for the inlined function's line and one for
// the line of the function it was inlined into (this test). (addr2line may name the inlined
// frame's function after the one it was inlined into; its file and line are the inlined code's.)
TEST(stack_trace, AnInlinedFunctionIsAFrameOfItsOwn)
{
  GPUMEM_SKIP_WITHOUT_LINES();
  auto const symbols       = inlined_caller().symbols();
  unsigned const call_line = __LINE__ - 1;
  ASSERT_GT(symbols.size(), 2U);
  auto const in_this_file = [](unsigned line) {
    return "stack_trace_test.cpp:" + std::to_string(line) + ")";
  };
  EXPECT_NE(symbols[1].find(in_this_file(inlined_call_line)), std::string::npos) << symbols[1];
  EXPECT_NE(symbols[2].find(in_this_file(call_line)), std::string::npos) << symbols[2];
  EXPECT_NE(symbols[2].find("TestBody"), std::string::npos) << symbols[2];
}

TEST(symbolizer, AnAddressIsNamedTheSameWayEveryTime)
{
  auto const t     = captured_here();
  auto const first = t.symbols();
  EXPECT_EQ(t.symbols(), first);  // the second time from the cache
  EXPECT_EQ(captured_here().symbols().front(), first.front());
}

// Without debug information: the module and the offset in it, or the exported symbol.
TEST(symbolizer, FallsBackToModuleAndOffset)
{
  code_location loc;
  loc.address = 0x7f00000ca2c4;
  loc.module  = "/usr/lib/libx.so";
  loc.offset  = 0xca2c4;
  EXPECT_EQ(loc.text(), "/usr/lib/libx.so(+0xca2c4)");
  loc.symbol        = "x::f(int)";
  loc.symbol_offset = 0x1c;
  EXPECT_EQ(loc.text(), "/usr/lib/libx.so(x::f(int)+0x1c)");
  EXPECT_EQ(loc.texts(), std::vector<std::string>{loc.text()});
  auto from_symbol_table   = loc;  // a function name but no file and line
  from_symbol_table.symbol = "";
  from_symbol_table.source = {{"x::h()", "", 0}};
  EXPECT_EQ(from_symbol_table.text(), "/usr/lib/libx.so(x::h())");
  loc.source = {{"x::g()", "/src/x.cpp", 12}, {"", "/src/y.cpp", 40}};
  EXPECT_EQ(loc.text(), "x::g() (/src/x.cpp:12)");
  EXPECT_EQ(loc.texts(),
            (std::vector<std::string>{"x::g() (/src/x.cpp:12)", "?? (/src/y.cpp:40)"}));

  code_location nowhere;
  nowhere.address = 0x10;
  EXPECT_EQ(nowhere.text(), "0x10");
  auto const none = symbolize({0x10});
  ASSERT_EQ(none.size(), 1U);
  EXPECT_EQ(none[0].module, "");
  EXPECT_EQ(none[0].text(), "0x10");
}

// A function of the C library (one no sanitizer intercepts); the C library has no debug
// information installed here, or some: either way it is named.
TEST(symbolizer, NamesAnAddressInASharedLibrary)
{
  auto const at  = reinterpret_cast<std::uintptr_t>(&::gnu_get_libc_version) + 1;
  auto const loc = symbolize({at}).at(0);
  EXPECT_NE(loc.module.find("libc"), std::string::npos) << loc.module;
  if (loc.source.empty()) {
    EXPECT_EQ(loc.text(), loc.module + "(gnu_get_libc_version+0x1)");
  } else {
    EXPECT_NE(loc.text().find("gnu_get_libc_version"), std::string::npos) << loc.text();
  }
}

}  // namespace
}  // namespace gpumem::detail
