#pragma once
// Google Benchmark's main loop, for the bench binaries that need their own main() (malloc tuning,
// a QApplication) before it.
#include <benchmark/benchmark.h>

namespace fragscope::bench {

inline int run_benchmarks(int& argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace fragscope::bench
