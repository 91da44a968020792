// Storage throughput and latency on 1.2M-event runs (Release build), synthetic (random sizes and
// addresses: the hard case for compression) and a real PyTorch trace:
//   ingest >= 3M events/s, <= 16 bytes/event on disk (no stacks), a 2000-bucket timeline of the
//   whole run < 20 ms, the segment state at an arbitrary event < 30 ms, memory by category of a
//   labelled run at any zoom < 20 ms (from the pyramid; /replay: the same query on a run stored
//   before the pyramid, which replays from event 0).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <random>
#include <span>

#include "engine/snapshot/snapshot.h"
#include "storage/db/event_chunk.h"
#include "storage/db/run_store.h"
#include "storage/db/segment_map.h"
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

// A simulated run's labels: allocations cycle through five categories, every seventh unlabelled.
std::vector<RequestLabel> label_table() {
  std::vector<RequestLabel> table{RequestLabel{}};
  for (const Category category :
       {Category::parameter, Category::gradient, Category::optimizer_state, Category::activation,
        Category::temporary})
    table.push_back({category, std::string(to_string(category)), -1});
  return table;
}
std::vector<LabelId> labels_of(std::span<const TraceEvent> events) {
  std::vector<LabelId> labels(events.size());
  std::uint32_t allocations = 0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i].action == TraceAction::alloc && ++allocations % 7 != 0)
      labels[i] = LabelId{1 + allocations % 5};
  }
  return labels;
}

// With `labels`, the run gets label_table() first and stores its memory by category.
RunId ingest(RunStore& store, std::span<const TraceEvent> events,
             std::span<const LabelId> labels = {}) {
  RunRecord record;
  record.name = "bench";
  const RunId id = store.begin_run(record);
  if (!labels.empty())
    store.set_labels(id, label_table());
  constexpr std::size_t kBatch = 65536;
  for (std::size_t i = 0; i < events.size(); i += kBatch) {
    const std::size_t count = std::min(kBatch, events.size() - i);
    store.append_events(id, events.subspan(i, count),
                        {{}, labels.empty() ? labels : labels.subspan(i, count)});
  }
  store.finish_run(id, RunStatus::ok);
  return id;
}

// Arg 0: an imported trace's run (no labels); 1: a simulated run's, with labels, which also
// stores memory by category.
void BM_Ingest(benchmark::State& state) {
  const auto& events = trace();
  const std::vector<LabelId> labels =
      state.range(0) == 1 ? labels_of(events) : std::vector<LabelId>{};
  double bytes_per_event = 0;
  for (auto _ : state) {
    state.PauseTiming();
    test::TempDir dir;
    const std::string path = dir.file("bench.db");
    state.ResumeTiming();
    {
      RunStore store(path);
      ingest(store, events, labels);
    }  // closing checkpoints the WAL into the database file
    state.PauseTiming();
    bytes_per_event =
        static_cast<double>(database_bytes(path)) / static_cast<double>(events.size());
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(events.size()));
  state.counters["bytes_per_event"] = bytes_per_event;
}
BENCHMARK(BM_Ingest)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();

// A real PyTorch trace (gpt_varlen_default, 77,925 entries, with stacks), repeated back to back
// up to 1.2M events with times shifted so they keep increasing.
const std::vector<TraceEvent>& real_trace() {
  static const auto events = [] {
    const auto snapshot =
        snapshot::read_snapshot(std::string(FRAGSCOPE_FIXTURES) + "/gpt_varlen_default.pickle.gz");
    const auto& base = snapshot.device_traces.at(0);
    std::vector<TraceEvent> out;
    out.reserve(kRunEvents);
    std::int64_t shift = 0;
    while (out.size() < kRunEvents) {
      for (TraceEvent event : base) {
        if (out.size() == kRunEvents)
          break;
        event.time_us += shift;
        out.push_back(event);
      }
      shift += base.back().time_us - base.front().time_us + 1;
    }
    return out;
  }();
  return events;
}

// An import's start state: the real trace's final segment map walked back through all of it.
void BM_RewindRealTrace(benchmark::State& state) {
  const auto& events = real_trace();
  SegmentMap final_state;
  final_state.apply_all(events);
  for (auto _ : state) {
    const SegmentMap start = rewind(final_state, events);
    benchmark::DoNotOptimize(start.blocks().size());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(events.size()));
}
BENCHMARK(BM_RewindRealTrace)->Unit(benchmark::kMillisecond);

// Ingest's keyframes: the real trace applied to one segment map a chunk (kEventsPerChunk) at a
// time, as ingest applies each chunk before serializing the map.
void BM_ApplyChunksRealTrace(benchmark::State& state) {
  const auto& events = real_trace();
  for (auto _ : state) {
    SegmentMap map;
    for (std::size_t first = 0; first < events.size(); first += kEventsPerChunk)
      map.apply_all(
          std::span(events).subspan(first, std::min(kEventsPerChunk, events.size() - first)));
    benchmark::DoNotOptimize(map.blocks().size());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(events.size()));
}
BENCHMARK(BM_ApplyChunksRealTrace)->Unit(benchmark::kMillisecond);

void BM_IngestRealTrace(benchmark::State& state) {
  const auto& events = real_trace();
  double bytes_per_event = 0;
  for (auto _ : state) {
    state.PauseTiming();
    test::TempDir dir;
    const std::string path = dir.file("real.db");
    state.ResumeTiming();
    {
      RunStore store(path);
      ingest(store, events);
    }
    state.PauseTiming();
    bytes_per_event =
        static_cast<double>(database_bytes(path)) / static_cast<double>(events.size());
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(events.size()));
  state.counters["bytes_per_event"] = bytes_per_event;
}
BENCHMARK(BM_IngestRealTrace)->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();

// The same ingest into a database already open, through the run's commit: without creating the
// file and its schema and without the checkpoint at close, whose fdatasync calls (about 14 per
// iteration above) take as long as the disk's other writers make them.
void BM_IngestRealTraceIntoOpenStore(benchmark::State& state) {
  const auto& events = real_trace();
  for (auto _ : state) {
    state.PauseTiming();
    test::TempDir dir;
    auto store = std::make_unique<RunStore>(dir.file("real.db"));
    state.ResumeTiming();
    ingest(*store, events);
    state.PauseTiming();
    store.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(events.size()));
}
BENCHMARK(BM_IngestRealTraceIntoOpenStore)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3)
    ->UseRealTime();

// The ingest codec alone: the real trace's events in stored chunks, encoded (packing + codec) and
// decoded with zlib (what databases before zstd hold) and zstd (what ingest writes now).
// bytes_per_event is the compressed size: the ratio of the two codecs is the size cost.
void BM_ChunkCodec(benchmark::State& state) {
  const auto codec = static_cast<BlobCodec>(state.range(0));
  const auto& events = real_trace();
  std::vector<EventChunk> chunks;
  for (std::size_t i = 0; i < events.size(); i += kEventsPerChunk) {
    EventChunk chunk;
    chunk.events.assign(
        events.begin() + static_cast<std::ptrdiff_t>(i),
        events.begin() + static_cast<std::ptrdiff_t>(std::min(events.size(), i + kEventsPerChunk)));
    chunk.series = derive_series(chunk.events);
    chunks.push_back(std::move(chunk));
  }
  std::size_t stored = 0;
  for (auto _ : state) {
    stored = 0;
    for (const auto& chunk : chunks) {
      const auto blob = encode_chunk(chunk, codec);
      stored += blob.size();
      benchmark::DoNotOptimize(blob.data());
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(events.size()));
  state.counters["bytes_per_event"] =
      static_cast<double>(stored) / static_cast<double>(events.size());
  state.SetLabel(codec == BlobCodec::zstd ? "zstd" : "zlib");
}
BENCHMARK(BM_ChunkCodec)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ChunkDecode(benchmark::State& state) {
  const auto codec = static_cast<BlobCodec>(state.range(0));
  const auto& events = real_trace();
  std::vector<std::vector<std::uint8_t>> blobs;
  for (std::size_t i = 0; i < events.size(); i += kEventsPerChunk) {
    EventChunk chunk;
    chunk.events.assign(
        events.begin() + static_cast<std::ptrdiff_t>(i),
        events.begin() + static_cast<std::ptrdiff_t>(std::min(events.size(), i + kEventsPerChunk)));
    chunk.series = derive_series(chunk.events);
    blobs.push_back(encode_chunk(chunk, codec));
  }
  for (auto _ : state)
    for (const auto& blob : blobs)
      benchmark::DoNotOptimize(decode_chunk(blob, "bench"));
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(events.size()));
  state.SetLabel(codec == BlobCodec::zstd ? "zstd" : "zlib");
}
BENCHMARK(BM_ChunkDecode)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

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

// A labelled 1.2M-event run (allocations cycle through five categories, every seventh unlabelled)
// and a copy of it without the category pyramid, as a database written before it would hold it.
struct LabelledRun {
  test::TempDir dir;
  std::string path = dir.file("labelled.db");
  RunId with_pyramid;
  RunId replayed;
  LabelledRun() {
    RunStore store(path);
    const auto labels = labels_of(trace());
    for (RunId* id : {&with_pyramid, &replayed})
      *id = ingest(store, trace(), labels);
    for (const char* table_name : {"category_levels", "category_chunks"}) {
      auto erase =
          store.database().prepare(std::string("DELETE FROM ") + table_name + " WHERE run_id = ?");
      erase.bind_int(1, replayed.value);
      erase.run();
    }
  }
};
LabelledRun& labelled_run() {
  static LabelledRun run;
  return run;
}

// Arg: 0 = the whole run in 2000 buckets, 1 = a 100k-event window, 2 = one event.
void category_zoom(benchmark::State& state, RunId run) {
  RunStore store(labelled_run().path, OpenMode::read_only);
  const std::uint64_t first = state.range(0) == 0 ? 0 : 600'000;
  const std::uint64_t end =
      state.range(0) == 0 ? kRunEvents : (state.range(0) == 1 ? 700'000 : 600'001);
  for (auto _ : state) {
    auto buckets = store.category_timeline(run, first, end, 2000);
    benchmark::DoNotOptimize(buckets.data());
  }
}
void BM_CategoryZoom(benchmark::State& state) {
  category_zoom(state, labelled_run().with_pyramid);
}
BENCHMARK(BM_CategoryZoom)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);
void BM_CategoryZoom_replay(benchmark::State& state) {
  category_zoom(state, labelled_run().replayed);
}
BENCHMARK(BM_CategoryZoom_replay)->Arg(0)->Arg(2)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fragscope::storage
