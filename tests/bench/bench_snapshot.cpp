// Snapshot import benchmarks: parse, timeline, writer. BM_LargeSnapshot reads the file named by
// FRAGSCOPE_LARGE_SNAPSHOT (tests/snapshot_tools/gen_large_snapshot.py writes a 1.2M-entry one);
// tests/snapshot_tools/compare_with_python.sh runs it beside python3's pickle.load.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "engine/snapshot/pickle_writer.h"
#include "engine/snapshot/snapshot.h"
#include "engine/snapshot/timeline.h"

namespace {
using namespace fragscope::snapshot;

std::filesystem::path fixture_path(const char* name) {
  return std::filesystem::path(FRAGSCOPE_FIXTURES) / (std::string(name) + ".pickle.gz");
}

void BM_ReadFixture(benchmark::State& state) {
  auto path = fixture_path("gpt_ckpt_accum");
  std::size_t entries = 0;
  for (auto _ : state) {
    Snapshot s = read_snapshot(path);
    entries = s.trace_entry_count();
    benchmark::DoNotOptimize(s);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * entries));
}
BENCHMARK(BM_ReadFixture)->Unit(benchmark::kMillisecond);

void BM_TimelineFixture(benchmark::State& state) {
  Snapshot s = read_snapshot(fixture_path("gpt_ckpt_accum"));
  for (auto _ : state) {
    Timeline tl = build_timeline(s, 0);
    benchmark::DoNotOptimize(tl);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * s.trace_entry_count()));
}
BENCHMARK(BM_TimelineFixture)->Unit(benchmark::kMillisecond);

void BM_WriteFixture(benchmark::State& state) {
  Snapshot s = read_snapshot(fixture_path("gpt_varlen_default"));
  std::size_t bytes = 0;
  for (auto _ : state) {
    std::string out = write_snapshot_pickle(s);
    bytes = out.size();
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_WriteFixture)->Unit(benchmark::kMillisecond);

// Parse + timeline of one large file, once: the figure compared with python3's pickle.load.
void BM_LargeSnapshot(benchmark::State& state) {
  const char* path = std::getenv("FRAGSCOPE_LARGE_SNAPSHOT");
  if (path == nullptr || !std::filesystem::exists(path)) {
    state.SkipWithError("set FRAGSCOPE_LARGE_SNAPSHOT to a snapshot file");
    return;
  }
  for (auto _ : state) {
    Snapshot s = read_snapshot(path);
    Timeline tl = build_timeline(s, 0);
    benchmark::DoNotOptimize(tl);
    state.counters["entries"] = static_cast<double>(s.trace_entry_count());
    state.counters["peak_allocated"] = static_cast<double>(tl.peak.allocated);
  }
}
BENCHMARK(BM_LargeSnapshot)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
