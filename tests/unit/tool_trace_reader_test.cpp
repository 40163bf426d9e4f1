// The trace reader and writer: format, errors with file and line, bounded buffer, round trip.
#include <gpumem/trace/trace_reader.hpp>
#include <gpumem/trace/trace_writer.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace gpumem::trace {
namespace {

std::string write_file(std::string const& name, std::string const& text)
{
  auto path =
      (std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()) + ".csv"))
          .string();
  std::ofstream{path, std::ios::binary} << text;
  return path;
}

std::string error_of(std::string const& text)
{
  auto path = write_file("bad", text);
  try {
    (void)read_all(path);
  } catch (trace_error const& e) {
    std::remove(path.c_str());
    return e.what();
  }
  std::remove(path.c_str());
  return "no error";
}

TEST(TraceReader, ParsesHeaderAndFields)
{
  auto path   = write_file("ok",
                           "Thread,Time,Action,Pointer,Size,Stream\r\n"
                             "0,17,allocate,0x7f5be0000000,154389504,0\n"
                             "\n"
                             "3,18.25,free,0x7F5BE0000000,154389504,0x10\n"
                             "2,10:01:02.5,allocate failure,0x0,64,12");
  auto events = read_all(path);
  std::remove(path.c_str());
  ASSERT_EQ(events.size(), 3U);
  EXPECT_EQ(events[0].act, action::allocate);
  EXPECT_EQ(events[0].pointer, 0x7f5be0000000ULL);
  EXPECT_EQ(events[0].size, 154389504U);
  EXPECT_EQ(events[0].time, 17U);
  EXPECT_EQ(events[1].act, action::free);
  EXPECT_EQ(events[1].thread, 3U);
  EXPECT_EQ(events[1].stream, 0x10U);
  EXPECT_EQ(events[2].act, action::allocate_failure);
  EXPECT_EQ(events[2].stream, 12U);
  EXPECT_EQ(events[2].line, 5U);
}

TEST(TraceReader, HeaderIsOptional)
{
  auto path   = write_file("nohdr", "0,1,allocate,4096,256,0\n");
  auto events = read_all(path);
  std::remove(path.c_str());
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(events[0].pointer, 4096U);
}

TEST(TraceReader, MalformedLinesNameFileLineAndExpectation)
{
  std::string const hdr = "Thread,Time,Action,Pointer,Size,Stream\n";
  auto e                = error_of(hdr + "0,1,allocate,0x10,256,0\n0,2,alocate,0x10,256,0\n");
  EXPECT_NE(e.find(":3: expected Action 'allocate', 'free' or 'allocate failure', found 'alocate'"),
            std::string::npos)
      << e;
  e = error_of(hdr + "0,1,allocate,0x10,256\n");
  EXPECT_NE(e.find(":2: expected ',' before the Stream column"), std::string::npos) << e;
  e = error_of(hdr + "0,1,allocate,0x10,-5,0\n");
  EXPECT_NE(e.find(":2: expected a decimal Size, found '-5'"), std::string::npos) << e;
  e = error_of(hdr + "0,1,free,0xzz,8,0\n");
  EXPECT_NE(e.find("expected hex digits of the Pointer"), std::string::npos) << e;
  e = error_of(hdr + "0,1,free,0x10,8,0,extra\n");
  EXPECT_NE(e.find("expected end of line after the Stream column"), std::string::npos) << e;
  e = error_of("Thread,When,Action\n");
  EXPECT_NE(e.find(":1: expected the header"), std::string::npos) << e;
  e = error_of(hdr + "0,1,allocate,0x10,99999999999999999999999,0\n");
  EXPECT_NE(e.find("Size below 2^64"), std::string::npos) << e;
  e = error_of(hdr + "0,1,allocate,0x10000000000000000,8,0\n");
  EXPECT_NE(e.find("at most 16 hex digits"), std::string::npos) << e;
}

// A message shows the whole field that was wrong ("0x100", not "x100"), and at most 80 bytes of
// it: a line of 1 MiB was once echoed whole.
TEST(TraceReader, MessagesShowTheWholeFieldButNotAWholeHugeLine)
{
  std::string const hdr = "Thread,Time,Action,Pointer,Size,Stream\n";
  auto e                = error_of(hdr + "0,1,allocate,0x10,0x100,0\n");
  EXPECT_NE(e.find(":2: expected a decimal Size, found '0x100'"), std::string::npos) << e;
  e = error_of(hdr + "0,1," + std::string(500000, 'a') + ",0x10,8,0\n");
  EXPECT_NE(e.find("found '" + std::string(80, 'a') + "...' (500000 bytes)"), std::string::npos)
      << e.substr(0, 300);
  EXPECT_LT(e.size(), 400U);
}

TEST(TraceReader, MissingFileSaysWhatToDo)
{
  try {
    trace_reader r{"/nonexistent/trace.csv"};
    FAIL() << "no error";
  } catch (trace_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("/nonexistent/trace.csv: cannot open"), std::string::npos);
    EXPECT_EQ(e.line(), 0U);
  }
}

TEST(TraceReader, SmallBufferStreamsManyLinesAndRewinds)
{
  auto path =
      (std::filesystem::temp_directory_path() / ("rt." + std::to_string(::getpid()) + ".csv"))
          .string();
  {
    trace_writer w{path};
    for (std::uint64_t i = 0; i < 10000; ++i) {
      w.write({.thread  = i % 7,
               .time    = i,
               .pointer = 0x1000 + (i / 2) * 256,
               .size    = 256 + i / 2,
               .stream  = i % 3,
               .act     = i % 2 ? action::free : action::allocate});
    }
  }
  trace_reader r{path, {.buffer_bytes = 256}};
  std::vector<event> chunk(333);
  std::uint64_t i = 0;
  for (auto n = r.read(chunk); n != 0; n = r.read(chunk)) {
    for (std::size_t k = 0; k < n; ++k, ++i) {
      ASSERT_EQ(chunk[k].pointer, 0x1000 + (i / 2) * 256) << i;
      ASSERT_EQ(chunk[k].size, 256 + i / 2);
      ASSERT_EQ(chunk[k].thread, i % 7);
      ASSERT_EQ(chunk[k].stream, i % 3);
      ASSERT_EQ(chunk[k].act, i % 2 ? action::free : action::allocate);
    }
  }
  EXPECT_EQ(i, 10000U);
  EXPECT_EQ(r.line(), 10001U);
  EXPECT_EQ(r.bytes_read(), r.file_bytes());
  r.rewind();
  event e;
  ASSERT_TRUE(r.next(e));
  EXPECT_EQ(e.pointer, 0x1000U);
  std::remove(path.c_str());
}

// What the writer writes, the reader reads: a stack of more than 1 MiB of text (every byte
// quoted) once made a line the reader refused. The writer cuts it at a frame boundary.
TEST(TraceReader, ReadsAStackOfMoreThanItsBufferAsTheWriterCutIt)
{
  auto path =
      (std::filesystem::temp_directory_path() / ("stack." + std::to_string(::getpid()) + ".csv"))
          .string();
  std::string frames;
  for (int i = 0; i < 90000; ++i) {
    frames += std::string(i == 0 ? "" : "|") + "f(\",\",\")" + std::to_string(i);
  }
  ASSERT_GT(frames.size(), std::size_t{1} << 20);
  {
    trace_writer w{path, true};
    w.write({.pointer = 0x1000, .size = 256, .act = action::allocate, .frames = frames});
  }
  trace_reader r{path};
  event e;
  ASSERT_TRUE(r.next(e));
  std::remove(path.c_str());
  EXPECT_LE(e.frames.size(), max_stack_bytes);
  EXPECT_GT(e.frames.size(), max_stack_bytes - 100);
  EXPECT_EQ(e.frames, frames.substr(0, e.frames.size()));  // the innermost frames, whole
  EXPECT_EQ(frames[e.frames.size()], frame_separator);
}

TEST(TraceReader, LineLongerThanBufferIsAnError)
{
  auto path = write_file("long", std::string(1000, '1') + "\n");
  trace_reader r{path, {.buffer_bytes = 256}};
  event e;
  EXPECT_THROW(r.next(e), trace_error);
  std::remove(path.c_str());
}

TEST(TraceReader, CutOffLastLineEndsTheTraceAndIsNamed)
{
  auto path = write_file("cut", "0,1,allocate,0x10,256,0\n0,2,free,0x10,256,0\n0,3,allocate,0x2");
  trace_reader r{path};
  event e;
  int n = 0;
  while (r.next(e)) { ++n; }
  EXPECT_EQ(n, 2);
  EXPECT_EQ(r.truncated_line(), 3U);
  std::remove(path.c_str());
  // the same line with its newline is malformed, not cut off
  EXPECT_NE(error_of("0,1,allocate,0x10,256,0\n0,3,allocate,0x2\n").find(":2: "),
            std::string::npos);
  // a whole last line without a newline is an event
  path = write_file("whole", "0,1,allocate,0x10,256,0");
  trace_reader whole{path};
  EXPECT_TRUE(whole.next(e));
  EXPECT_FALSE(whole.next(e));
  EXPECT_EQ(whole.truncated_line(), 0U);
  std::remove(path.c_str());
}

}  // namespace
TEST(TraceReader, SixColumnTracesHaveNoFrames)
{
  auto path = write_file("six", "Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0x10,64,0\n");
  auto events = read_all(path);
  std::remove(path.c_str());
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(events[0].frames, "");
  // A 7th column without the Frames header is an error, as it always was.
  EXPECT_NE(error_of("Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0x10,64,0,f\n")
                .find("end of line after the Stream column"),
            std::string::npos);
}

TEST(TraceReader, FramesColumnPlainQuotedOrLeftOut)
{
  auto path   = write_file("frames",
                           "Thread,Time,Action,Pointer,Size,Stream,Frames\n"
                             "0,1,allocate,0x10,64,0,inner (a.py:3)|outer (b.py:9)\n"
                             "0,2,allocate,0x20,64,0,\"f<int, \"\"q\"\">|main\"\n"
                             "0,3,free,0x10,64,0\n"
                             "0,4,free,0x20,64,0,\n");
  auto events = read_all(path);
  std::remove(path.c_str());
  ASSERT_EQ(events.size(), 4U);
  EXPECT_EQ(events[0].frames, "inner (a.py:3)|outer (b.py:9)");
  EXPECT_EQ(events[1].frames, "f<int, \"q\">|main");
  EXPECT_EQ(events[1].stream, 0U);
  EXPECT_EQ(events[2].frames, "");
  EXPECT_EQ(events[3].frames, "");
  EXPECT_NE(
      error_of("Thread,Time,Action,Pointer,Size,Stream,Frames\n0,1,allocate,0x10,64,0,\"open\n")
          .find("closing"),
      std::string::npos);
}

TEST(TraceWriter, FramesRoundTripThroughTheReader)
{
  auto path =
      (std::filesystem::temp_directory_path() / ("frt." + std::to_string(::getpid()) + ".csv"))
          .string();
  std::vector<std::string> const stacks = {"", "a", "f(int, char)|g", "say \"hi\"|main",
                                           frame_text("operator|(x)\nline2") + "|main"};
  {
    trace_writer w{path, true};
    std::uint64_t i = 0;
    for (auto const& s : stacks) {
      event e{.thread = 0, .time = i, .pointer = 0x100 * (i + 1), .size = 64, .stream = 0};
      e.frames = s;
      w.write(e);
      ++i;
    }
    w.close();
  }
  auto events = read_all(path);
  std::remove(path.c_str());
  ASSERT_EQ(events.size(), stacks.size());
  for (std::size_t i = 0; i < stacks.size(); ++i) { EXPECT_EQ(events[i].frames, stacks[i]) << i; }
  EXPECT_EQ(stacks[4], "operator/(x) line2|main");  // a frame's own '|' and line break go
}

TEST(TraceWriter, WithoutFramesWritesTheSixColumnHeader)
{
  auto path =
      (std::filesystem::temp_directory_path() / ("six." + std::to_string(::getpid()) + ".csv"))
          .string();
  {
    trace_writer w{path};
    event e{.pointer = 0x10, .size = 64};
    e.frames = "ignored";
    w.write(e);
    w.close();
  }
  std::ifstream in{path};
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  std::remove(path.c_str());
  EXPECT_EQ(header, csv_header);
  EXPECT_EQ(row, "0,0,allocate,0x10,64,0");
}

}  // namespace gpumem::trace
