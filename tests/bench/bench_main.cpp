// fragscope-bench's main: Google Benchmark's, after the malloc tuning that fragscope-cli and the
// GUI start with (engine/core/malloc_tuning.h). Without it the benchmarks measured a process the
// product never runs: on 4 KiB pages BM_FullReplay/streams_default gave 8.3-11.7 M events/s from
// one run of the binary to the next (idle, load 0.4-1.0), and 11.85-11.98 with huge pages.
#include "bench/bench_run.h"
#include "engine/core/malloc_tuning.h"

int main(int argc, char** argv) {
  fragscope::use_huge_page_malloc(argv);
  return fragscope::bench::run_benchmarks(argc, argv);
}
