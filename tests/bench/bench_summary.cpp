// The Summary page's memory_stats() at any cursor of a 1.2M-event run (Release build): a real
// recording (gpt_fixedlen_default) repeated to 1.2M entries so it replays exactly, imported with
// its allocator-state keyframes. Target < 50 ms at any event.
//   BM_SummaryAtRandomEvent/N   from the keyframe before the event, keyframes every N events (at
//                               most N events replayed); N = kStatsKeyframeInterval is the import's
//   BM_SummaryFromEventZero     the same events replayed from event 0 (a run without keyframes)
//   BM_StoreStatsKeyframes/N    building the keyframes every N events once, as the import does
// The two /N pairs weigh the import's chain (fewer keyframes, less seeding) against the cursor.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <map>
#include <random>
#include <set>

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

// The recording's database with its keyframes stored every `interval` events instead (a copy).
const std::string& recording_with_interval(std::uint64_t interval) {
  static std::map<std::uint64_t, std::string> paths;
  if (const auto found = paths.find(interval); found != paths.end())
    return found->second;
  const std::string path = recording().dir.file("summary-" + std::to_string(interval) + ".db");
  std::filesystem::copy_file(recording().path, path,
                             std::filesystem::copy_options::overwrite_existing);
  RunStore store(path);
  store_stats_keyframes(store, recording().run, interval);
  return paths.emplace(interval, path).first->second;
}

void summaries(benchmark::State& state, StatsStart start, const std::string& path) {
  RunStore store(path, OpenMode::read_only);
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

// The import's interval and the ones around it.
void keyframe_intervals(benchmark::internal::Benchmark* benchmark) {
  const std::set<std::uint64_t> intervals = {8192, 16384, 32768, kStatsKeyframeInterval};
  for (const std::uint64_t interval : intervals)
    benchmark->Arg(static_cast<std::int64_t>(interval));
}

void BM_SummaryAtRandomEvent(benchmark::State& state) {
  summaries(state, StatsStart::nearest_keyframe,
            recording_with_interval(static_cast<std::uint64_t>(state.range(0))));
}
BENCHMARK(BM_SummaryAtRandomEvent)->Apply(keyframe_intervals)->Unit(benchmark::kMillisecond);

void BM_SummaryFromEventZero(benchmark::State& state) {
  summaries(state, StatsStart::first_event, recording().path);
}
BENCHMARK(BM_SummaryFromEventZero)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_StoreStatsKeyframes(benchmark::State& state) {
  RunStore store(recording().path);
  const auto interval = static_cast<std::uint64_t>(state.range(0));
  std::size_t count = 0;
  for (auto _ : state)
    count = store_stats_keyframes(store, recording().run, interval);
  state.counters["keyframes"] = static_cast<double>(count);
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(recording().events));
}
BENCHMARK(BM_StoreStatsKeyframes)
    ->Apply(keyframe_intervals)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace
}  // namespace fragscope::storage
