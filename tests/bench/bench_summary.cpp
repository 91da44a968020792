// The Summary page's memory_stats() at any cursor of a 1.2M-event run (Release build): a real
// recording (gpt_fixedlen_default) repeated to 1.2M entries so it replays exactly, imported with
// its allocator-state keyframes. Target < 50 ms at any event.
//   BM_SummaryAtRandomEvent     from the keyframe before the event (at most 8192 events replayed)
//   BM_SummaryFromEventZero     the same events replayed from event 0 (a run without keyframes)
//   BM_StoreStatsKeyframes      building the keyframes once, after ingest
#include <benchmark/benchmark.h>

#include <random>

#include "bench/tools/large_snapshot.h"
#include "engine/snapshot/snapshot.h"
#include "storage/db/snapshot_import.h"
#include "storage/db/stats_at.h"
#include "storage/db/stats_keyframes.h"
#include "storage/storage_test_util.h"

namespace fragscope::storage {
namespace {

constexpr std::size_t kEntries = 1'200'000;

struct RepeatedRecording {
  test::TempDir dir;
  std::string path = dir.file("summary.db");
  RunId run;
  std::uint64_t events = 0;
  RepeatedRecording() {
    const snapshot::Snapshot source = snapshot::read_snapshot(std::string(FRAGSCOPE_FIXTURES) +
                                                              "/gpt_fixedlen_default.pickle.gz");
    const snapshot::Snapshot big = bench::repeat_recorded_trace(source, kEntries);
    RunStore store(path);
    ImportOptions options;
    options.name = "gpt_fixedlen_default x" + std::to_string(kEntries / 52554);
    run = import_snapshot(store, big, options).run;
    events = store.run(run).event_count;
  }
};
RepeatedRecording& recording() {
  static RepeatedRecording instance;
  return instance;
}

void summaries(benchmark::State& state, StatsStart start) {
  RunStore store(recording().path, OpenMode::read_only);
  std::mt19937_64 random(11);
  std::uint64_t replayed = 0;
  for (auto _ : state) {
    const MemoryStatsAt at =
        memory_stats_at(store, recording().run, random() % (recording().events + 1), start);
    replayed += at.event_index - at.replayed_from;
    benchmark::DoNotOptimize(at.stats);
  }
  state.counters["events_replayed"] =
      static_cast<double>(replayed) / static_cast<double>(state.iterations());
  state.counters["run_events"] = static_cast<double>(recording().events);
}

void BM_SummaryAtRandomEvent(benchmark::State& state) {
  summaries(state, StatsStart::nearest_keyframe);
}
BENCHMARK(BM_SummaryAtRandomEvent)->Unit(benchmark::kMillisecond);

void BM_SummaryFromEventZero(benchmark::State& state) {
  summaries(state, StatsStart::first_event);
}
BENCHMARK(BM_SummaryFromEventZero)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_StoreStatsKeyframes(benchmark::State& state) {
  RunStore store(recording().path);
  std::size_t count = 0;
  for (auto _ : state)
    count = store_stats_keyframes(store, recording().run);
  state.counters["keyframes"] = static_cast<double>(count);
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(recording().events));
}
BENCHMARK(BM_StoreStatsKeyframes)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
}  // namespace fragscope::storage
