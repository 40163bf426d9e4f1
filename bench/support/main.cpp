// main() of every microbenchmark: Google Benchmark's, plus --smoke (run each benchmark for a
// few iterations only, so CI proves the benchmarks run without spending time on them).
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <vector>

int main(int argc, char** argv)
{
  std::vector<char*> args;
  // Seconds as a plain double: Google Benchmark 1.7 (Debian) does not parse the "1x" form.
  static std::string min_time = "--benchmark_min_time=0.001";
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--smoke") == 0) {
      args.push_back(min_time.data());
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
