// What storing and reading a run holds. Ingest hands a chunk to its worker a part at a time
// (RunWriter::Ingest::kEventsPerPart): the chunk's blob is the one encode_chunk gives of the whole
// chunk, and ingest does not hold a chunk's events twice. RunReader::events decodes the events it
// returns, not whole chunks. The bytes operator new holds are counted (tests/counted_new.cpp): a
// reader's peak is inside one call, where no sample reaches.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "storage/db/event_chunk.h"
#include "storage/db/run_reader.h"
#include "storage/db/run_writer.h"
#include "storage/db/schema.h"
#include "storage_test_util.h"
#include "tests/heap_test_util.h"
#include "tests/new_bytes_test_util.h"

namespace fragscope::storage {
namespace {

EventChunk chunk_of(std::span<const TraceEvent> events, const SeriesPoint& start) {
  EventChunk chunk;
  chunk.start = start;
  chunk.events.assign(events.begin(), events.end());
  chunk.series = derive_series(events, start);
  // A residual in every series, as an allocator model's exact block sizes give.
  for (std::size_t i = 0; i < chunk.series.size(); ++i)
    chunk.series[i].allocated += static_cast<std::int64_t>(i % 512);
  return chunk;
}

// The blob of `chunk` encoded in the parts `cuts` marks (event indices), with labels only for the
// events of parts `labelled` lists; the whole chunk's labels are those, 0 elsewhere.
std::vector<std::uint8_t> encoded_in_parts(const EventChunk& chunk,
                                           const std::vector<std::size_t>& cuts,
                                           const std::vector<bool>& labelled) {
  ChunkEncoder encoder;
  encoder.begin(chunk.start);
  std::size_t first = 0;
  for (std::size_t part = 0; part <= cuts.size(); ++part) {
    const std::size_t end = part < cuts.size() ? cuts[part] : chunk.events.size();
    const auto events = std::span(chunk.events).subspan(first, end - first);
    const auto series = std::span(chunk.series).subspan(first, end - first);
    std::span<const LabelId> labels;
    if (labelled[part])
      labels = std::span(chunk.labels).subspan(first, end - first);
    encoder.append(events, series, labels);
    first = end;
  }
  EXPECT_EQ(encoder.count(), chunk.events.size());
  const auto blob = encoder.finish();
  return {blob.begin(), blob.end()};
}

TEST(RunMemory, AChunkEncodedInPartsIsTheWholeChunksBlob) {
  const auto events = test::synthetic_trace(50000, 7);
  const SeriesPoint start{1 << 20, 1 << 22, 1 << 20, 1 << 20};
  EventChunk chunk = chunk_of(events, start);
  const std::vector<std::size_t> cuts = {1, 16384, 16385, 40000};

  EXPECT_EQ(encoded_in_parts(chunk, cuts, {false, false, false, false, false}),
            encode_chunk(chunk));

  // Labelled from the third part on, then unlabelled again in the last: the chunk carries labels,
  // 0 for the events of unlabelled parts, as when the writer held the chunk whole.
  chunk.labels.resize(chunk.events.size());
  for (std::size_t i = 0; i < chunk.labels.size(); ++i)
    chunk.labels[i] = LabelId{static_cast<std::uint32_t>(1 + i % 5)};
  EventChunk whole = chunk;
  std::fill(whole.labels.begin(), whole.labels.begin() + 16384, LabelId{});
  std::fill(whole.labels.begin() + 40000, whole.labels.end(), LabelId{});
  const auto blob = encoded_in_parts(chunk, cuts, {false, false, true, true, false});
  EXPECT_EQ(blob, encode_chunk(whole));
  EXPECT_EQ(decode_chunk(blob, "test").labels, whole.labels);
}

// A part whose series ingest derived from the trace (no producer series) has zero residuals, so
// the encoder writes none for it: the chunk's blob is still the whole chunk's, whichever of its
// parts came with producer series, and the residual columns are left out when none did. Every
// mix of sources is tried, over parts that include an empty one (the repeated cut).
TEST(RunMemory, PartsWithDerivedSeriesGiveTheWholeChunksBlob) {
  const auto events = test::synthetic_trace(50000, 11);
  const SeriesPoint start{1 << 20, 1 << 22, 1 << 20, 1 << 20};
  EventChunk chunk;
  chunk.start = start;
  chunk.events = events;
  chunk.series = derive_series(events, start);
  const std::vector<std::size_t> cuts = {1, 16384, 16384, 16385, 40000};
  const std::size_t parts = cuts.size() + 1;
  using enum ChunkEncoder::SeriesSource;
  // Part p is a producer part when bit p of `producers` is set.
  const auto encoded = [&](unsigned producers) {
    ChunkEncoder encoder;
    encoder.begin(chunk.start);
    std::size_t first = 0;
    for (std::size_t part = 0; part < parts; ++part) {
      const std::size_t end = part < cuts.size() ? cuts[part] : chunk.events.size();
      encoder.append(std::span(chunk.events).subspan(first, end - first),
                     std::span(chunk.series).subspan(first, end - first), {},
                     (producers >> part & 1) != 0 ? producer : derived);
      first = end;
    }
    const auto blob = encoder.finish();
    return std::vector<std::uint8_t>(blob.begin(), blob.end());
  };
  const auto whole = encode_chunk(chunk);
  for (unsigned producers = 0; producers < 1u << parts; ++producers)
    ASSERT_EQ(encoded(producers), whole) << "producer parts " << producers;

  // Producer series with residuals in the fourth and sixth parts (the series after them follow):
  // those two parts must be producer parts, the others may be either.
  for (const std::size_t i : {16384, 45000}) {
    chunk.series[i].allocated += 4096;
    chunk.series[i].requested -= 512;
    for (std::size_t j = i + 1; j < chunk.series.size(); ++j)
      chunk.series[j] = plus(chunk.series[j - 1], trace_delta(chunk.events[j]));
  }
  const auto with_residuals = encode_chunk(chunk);
  constexpr unsigned kResidualParts = 1u << 3 | 1u << 5;
  for (unsigned producers = 0; producers < 1u << parts; ++producers) {
    if ((producers & kResidualParts) != kResidualParts)
      continue;
    const auto blob = encoded(producers);
    ASSERT_EQ(blob, with_residuals) << "producer parts " << producers;
    ASSERT_EQ(decode_chunk(blob, "test").series, chunk.series) << "producer parts " << producers;
  }
}

// The encoder takes a part's word that its series are derived: it computes no residual for it.
TEST(RunMemory, APartDeclaredDerivedStoresNoResiduals) {
  const auto events = test::synthetic_trace(3000, 12);
  std::vector<SeriesPoint> series = derive_series(events);
  for (auto& point : series)
    point.active += 1000;  // not what the trace derives
  ChunkEncoder encoder;
  encoder.begin({});
  encoder.append(events, series, {}, ChunkEncoder::SeriesSource::derived);
  EXPECT_EQ(decode_chunk(encoder.finish(), "test").series, derive_series(events));
}

// A trace that holds a few blocks at a time in one segment, however long: what the store keeps
// of its state (the segment map, memory by category) stays small.
std::vector<TraceEvent> steady_trace(std::size_t count) {
  constexpr std::uint64_t kSegment = 0x7f0000000000;
  std::vector<TraceEvent> events;
  events.reserve(count);
  std::int64_t time = 1'700'000'000'000'000;
  events.emplace_back(TraceAction::segment_alloc, kSegment, Bytes{1} << 30, StreamId{}, time);
  for (std::uint64_t k = 0; events.size() < count; ++k) {
    const std::uint64_t addr = kSegment + (k % 64) * (Bytes{1} << 20);
    const Bytes size = 512 * (1 + k % 977);
    time += static_cast<std::int64_t>(k % 13);
    events.emplace_back(TraceAction::alloc, addr, size, StreamId{}, time, FrameStackId{});
    events.emplace_back(TraceAction::free_requested, addr, size, StreamId{}, time + 1);
    events.emplace_back(TraceAction::free_completed, addr, size, StreamId{}, time + 2);
  }
  events.resize(count);
  return events;
}

// Ingest held the chunk being filled and the one its worker compressed, events and series
// unpacked (72 bytes an event: 9.4 MB for two 64k-event chunks, a quarter of what importing a
// 68 MB snapshot of 1.2M small entries peaked at). It now holds two parts of a chunk unpacked,
// the chunk's packed columns and categories, the levels being filled and the store's page cache:
// 8.4 MB in the debug build.
TEST(RunMemory, AWriterHoldsTwoPartsOfAChunkUnpacked) {
  test::TempDir dir;
  const std::unique_ptr<Database> db = open_store_database(dir.file("runs.db"));
  const auto events = steady_trace(4 * kEventsPerChunk + 1000);
  std::vector<SeriesPoint> series = derive_series(events);
  for (std::size_t i = 0; i < series.size(); ++i)
    series[i].allocated += static_cast<std::int64_t>(i % 512);
  RunWriter writer(*db);
  fragscope::test::HeapPeak heap;
  if (!heap.measurable())
    GTEST_SKIP() << "mallinfo2 reports nothing under this allocator (a sanitizer's)";
  const RunId run = writer.begin_run(test::record_named("parts"));
  constexpr std::size_t kBatch = 4096;
  for (std::size_t first = 0; first < events.size(); first += kBatch) {
    const std::size_t count = std::min(kBatch, events.size() - first);
    writer.append_events(run, std::span(events).subspan(first, count),
                         EventColumns{std::span(series).subspan(first, count), {}});
    heap.sample();
  }
  const RunRecord stored = writer.finish_run(run, RunStatus::ok);
  EXPECT_LE(heap.grown(), std::size_t{10} << 20) << "bytes beside the events appended";

  RunReader reader(*db);
  EXPECT_EQ(stored.event_count, events.size());
  EXPECT_EQ(reader.events(run, 0, events.size()), events);
  EXPECT_EQ(reader.series(run, 0, events.size()), series);
}

// A run of `events` stored in `db` under `name`.
RunId stored_run(Database& db, const std::vector<TraceEvent>& events, const std::string& name) {
  RunWriter writer(db);
  const RunId run = writer.begin_run(test::record_named(name));
  writer.append_events(run, events);
  writer.finish_run(run, RunStatus::ok);
  return run;
}

// The stats keyframes an import stores read 12k events at a time (kStatsKeyframeInterval and the
// lookahead); a window across a chunk boundary held both chunks decoded, events and series (9.4
// MB), to copy 12k events out. Now the window and one chunk's decompressed columns.
TEST(RunMemory, EventsOfAWindowDecodeNoWholeChunk) {
  test::TempDir dir;
  const std::unique_ptr<Database> db = open_store_database(dir.file("runs.db"));
  const auto events = steady_trace(2 * kEventsPerChunk + 5000);
  const RunId run = stored_run(*db, events, "window");
  RunReader reader(*db);

  const std::uint64_t first = kEventsPerChunk - 6000;
  const std::uint64_t end = kEventsPerChunk + 6000;
  const fragscope::test::NewPeak peak;
  const std::vector<TraceEvent> window = reader.events(run, first, end);
  EXPECT_LE(peak.grown(), window.size() * sizeof(TraceEvent) + (std::size_t{1} << 20))
      << "bytes to read " << window.size() << " events";
  EXPECT_EQ(window, std::vector<TraceEvent>(events.begin() + first, events.begin() + end));
  // Past the run's end, a whole run, and windows inside one chunk read as before.
  EXPECT_EQ(reader.events(run, 0, events.size() + 10), events);
  EXPECT_EQ(reader.events(run, 2 * kEventsPerChunk + 10, 2 * kEventsPerChunk + 20),
            std::vector<TraceEvent>(events.begin() + 2 * kEventsPerChunk + 10,
                                    events.begin() + 2 * kEventsPerChunk + 20));
  EXPECT_TRUE(reader.events(run, 5, 5).empty());
}

// The stats keyframes an import stores go through the run 8k events at a time, each window
// starting inside the last one's lookahead; through events() every window decoded its chunk from
// the start, each chunk eight times over. A stream decodes each chunk once, holding its inflated
// columns only.
TEST(RunMemory, AStreamReadsARunForwardHoldingOneChunksColumns) {
  test::TempDir dir;
  const std::unique_ptr<Database> db = open_store_database(dir.file("runs.db"));
  const auto events = steady_trace(2 * kEventsPerChunk + 5000);
  const RunId run = stored_run(*db, events, "stream");
  RunReader reader(*db);

  RunReader::EventStream stream = reader.event_stream(run);
  std::vector<TraceEvent> read;
  read.reserve(events.size() + 10);
  const std::size_t windows[] = {1, 8192, 12288, 70000, 3, kEventsPerChunk};
  for (std::size_t k = 0; stream.position() < events.size(); ++k) {
    const std::uint64_t before = stream.position();
    const std::size_t window = windows[k % std::size(windows)];
    const std::size_t size_before = read.size();
    const fragscope::test::NewPeak peak;
    const std::size_t got = stream.read(window, read);
    EXPECT_EQ(got, std::min<std::uint64_t>(window, events.size() - before));
    EXPECT_EQ(read.size() - size_before, got);
    EXPECT_EQ(stream.position(), before + got);
    // A read that starts a chunk inflates its columns; it never decodes the chunk's events.
    EXPECT_LE(peak.grown(), std::size_t{1} << 20)
        << "bytes to read " << got << " events from " << before;
  }
  EXPECT_EQ(read, events);
  EXPECT_EQ(stream.read(10, read), 0u);

  // From inside a chunk, across its end; from past the run's end, nothing.
  RunReader::EventStream inside = reader.event_stream(run, kEventsPerChunk - 10);
  std::vector<TraceEvent> across;
  EXPECT_EQ(inside.read(30, across), 30u);
  EXPECT_EQ(across, std::vector<TraceEvent>(events.begin() + kEventsPerChunk - 10,
                                            events.begin() + kEventsPerChunk + 20));
  RunReader::EventStream past = reader.event_stream(run, events.size() + 5);
  EXPECT_EQ(past.position(), events.size());
  EXPECT_EQ(past.read(10, across), 0u);
}

// A run whose record counts more events than its chunks hold (a damaged database) is an error
// naming the chunk, not a short or endless read.
TEST(RunMemory, AStreamPastTheStoredChunksIsAnError) {
  test::TempDir dir;
  const std::unique_ptr<Database> db = open_store_database(dir.file("runs.db"));
  const auto events = steady_trace(kEventsPerChunk + 100);
  const RunId run = stored_run(*db, events, "short");
  db->exec("UPDATE runs SET event_count = event_count + 50");
  RunReader reader(*db);
  RunReader::EventStream stream = reader.event_stream(run);
  std::vector<TraceEvent> read;
  try {
    stream.read(events.size() + 50, read);
    FAIL() << "expected DatabaseError";
  } catch (const DatabaseError& error) {
    EXPECT_NE(std::string(error.what()).find("events from 65536"), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace fragscope::storage
