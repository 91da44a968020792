// Storage throughput and latency on a 1.2M-event run (Release build):
//   ingest >= 3M events/s, <= 16 bytes/event on disk (no stacks), a 2000-bucket timeline of the
//   whole run < 20 ms, the segment state at an arbitrary event < 30 ms.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <random>

#include "storage/db/run_store.h"
#include "storage/storage_test_util.h"

namespace fragscope::storage {
namespace {

constexpr std::size_t kRunEvents = 1'200'000;

const std::vector<TraceEvent>& trace() {
  static const auto events = test::synthetic_trace(kRunEvents, 42);
  return events;
}

std::uintmax_t database_bytes(const std::string& path) {
  std::uintmax_t total = 0;
  for (const char* suffix : {"", "-wal"}) {
    std::error_code missing;
    const auto size = std::filesystem::file_size(path + suffix, missing);
    if (!missing)
      total += size;
  }
  return total;
}

RunId ingest(RunStore& store, std::span<const TraceEvent> events) {
  RunRecord record;
  record.name = "bench";
  const RunId id = store.begin_run(record);
  constexpr std::size_t kBatch = 65536;
  for (std::size_t i = 0; i < events.size(); i += kBatch)
    store.append_events(id, events.subspan(i, std::min(kBatch, events.size() - i)));
  store.finish_run(id, RunStatus::ok);
  return id;
}

void BM_Ingest(benchmark::State& state) {
  const auto& events = trace();
  double bytes_per_event = 0;
  for (auto _ : state) {
    state.PauseTiming();
    test::TempDir dir;
    const std::string path = dir.file("bench.db");
    state.ResumeTiming();
    {
      RunStore store(path);
      ingest(store, events);
    }  // closing checkpoints the WAL into the database file
    state.PauseTiming();
    bytes_per_event =
        static_cast<double>(database_bytes(path)) / static_cast<double>(events.size());
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(events.size()));
  state.counters["bytes_per_event"] = bytes_per_event;
}
BENCHMARK(BM_Ingest)->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();

// One stored 1.2M-event run shared by the read benchmarks.
struct StoredRun {
  test::TempDir dir;
  std::string path = dir.file("read.db");
  RunId id;
  StoredRun() {
    RunStore store(path);
    id = ingest(store, trace());
  }
};
StoredRun& stored_run() {
  static StoredRun run;
  return run;
}

void BM_Timeline2000Buckets(benchmark::State& state) {
  RunStore store(stored_run().path, OpenMode::read_only);
  for (auto _ : state) {
    auto buckets = store.timeline(stored_run().id, 2000);
    benchmark::DoNotOptimize(buckets.data());
  }
}
BENCHMARK(BM_Timeline2000Buckets)->Unit(benchmark::kMillisecond);

void BM_TimelineZoomed(benchmark::State& state) {
  // A window of 100k events: a finer level of the pyramid.
  RunStore store(stored_run().path, OpenMode::read_only);
  for (auto _ : state) {
    auto buckets = store.timeline(stored_run().id, 500'000, 600'000, 2000);
    benchmark::DoNotOptimize(buckets.data());
  }
}
BENCHMARK(BM_TimelineZoomed)->Unit(benchmark::kMillisecond);

void BM_SegmentStateAtRandomEvent(benchmark::State& state) {
  RunStore store(stored_run().path, OpenMode::read_only);
  std::mt19937_64 random(7);
  for (auto _ : state) {
    auto at = store.segment_state(stored_run().id, random() % kRunEvents);
    benchmark::DoNotOptimize(at.state.blocks().size());
  }
}
BENCHMARK(BM_SegmentStateAtRandomEvent)->Unit(benchmark::kMillisecond);

void BM_EventsWindow(benchmark::State& state) {
  RunStore store(stored_run().path, OpenMode::read_only);
  for (auto _ : state) {
    auto events = store.events(stored_run().id, 700'000, 710'000);
    benchmark::DoNotOptimize(events.data());
  }
}
BENCHMARK(BM_EventsWindow)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fragscope::storage
