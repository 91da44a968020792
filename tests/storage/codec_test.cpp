#include <gtest/gtest.h>

#include "storage/db/database.h"
#include "storage/db/event_chunk.h"
#include "storage/db/packing.h"
#include "storage/db/segment_map.h"
#include "storage_test_util.h"

namespace fragscope::storage {
namespace {

using test::synthetic_trace;

TEST(Packing, VarintsAndZigzagRoundTrip) {
  std::vector<std::uint8_t> bytes;
  const std::vector<std::int64_t> values = {0, 1, -1, 63, -64, 1 << 20, INT64_MAX, INT64_MIN};
  for (const auto v : values)
    put_signed(bytes, v);
  ByteReader in(bytes, "test");
  for (const auto v : values)
    EXPECT_EQ(in.signed_varint(), v);
  EXPECT_TRUE(in.at_end());
  EXPECT_THROW(in.varint(), DatabaseError);
}

TEST(EventChunk, RoundTripsEveryFieldIncludingExtremes) {
  EventChunk chunk;
  chunk.start = {100, 2 << 20, 100, 90};
  chunk.events = synthetic_trace(5000, 9);
  // Values at the edges of their types survive the delta coding.
  chunk.events.push_back({TraceAction::oom, UINT64_MAX, UINT64_MAX, StreamId{UINT64_MAX}, INT64_MIN,
                          FrameStackId{UINT32_MAX}});
  chunk.events.push_back({TraceAction::snapshot, 0, 0, StreamId{0}, INT64_MAX, FrameStackId{0}});
  chunk.series = derive_series(chunk.events, chunk.start);
  chunk.series[10].active -= 77;
  chunk.labels.assign(chunk.events.size(), LabelId{3});
  const auto blob = encode_chunk(chunk);
  const EventChunk decoded = decode_chunk(blob, "test");
  EXPECT_EQ(decoded.start, chunk.start);
  EXPECT_EQ(decoded.events, chunk.events);
  EXPECT_EQ(decoded.series, chunk.series);
  EXPECT_EQ(decoded.labels, chunk.labels);
}

TEST(EventChunk, ARealisticChunkIsCompact) {
  EventChunk chunk;
  chunk.events = synthetic_trace(kEventsPerChunk, 1);
  chunk.series = derive_series(chunk.events);
  const auto blob = encode_chunk(chunk);
  const double per_event = static_cast<double>(blob.size()) / static_cast<double>(kEventsPerChunk);
  EXPECT_LT(per_event, 16.0);
  std::cout << "synthetic chunk: " << per_event << " bytes/event\n";
}

// Databases written before zstd hold zlib blobs: they must read back unchanged, and a damaged
// blob of either codec is an error.
TEST(EventChunk, ReadsZlibChunksOfOlderDatabasesAndZstdChunks) {
  EventChunk chunk;
  chunk.events = synthetic_trace(4000, 5);
  chunk.series = derive_series(chunk.events);
  for (const BlobCodec codec : {BlobCodec::zlib, BlobCodec::zstd}) {
    const auto blob = encode_chunk(chunk, codec);
    const EventChunk decoded = decode_chunk(blob, "run 1");
    EXPECT_EQ(decoded.events, chunk.events);
    EXPECT_EQ(decoded.series, chunk.series);
    for (std::size_t at : {blob.size() - 3, blob.size() / 2, blob.size() - blob.size() / 4}) {
      auto damaged = blob;
      damaged[at] ^= 0x24;
      EXPECT_THROW(decode_chunk(damaged, "run 1"), DatabaseError) << "byte " << at;
    }
  }
  // New blobs are zstd frames (magic 28 b5 2f fd after the header).
  const auto raw = std::vector<std::uint8_t>(1000, 7);
  const auto zstd = compress_bytes(raw, BlobCodec::zstd);
  ASSERT_GE(zstd.size(), 4u);
  EXPECT_EQ(zstd[0], 0x28);
  EXPECT_EQ(inflate_bytes(deflate_bytes(raw), raw.size(), "blob"), raw);
  EXPECT_EQ(inflate_bytes(compress_bytes(raw, BlobCodec::zlib), raw.size(), "blob"), raw);
  EXPECT_THROW(inflate_bytes(zstd, raw.size() + 1, "blob"), DatabaseError);
}

// Ingest encodes chunk after chunk with one ChunkEncoder: nothing of an earlier chunk (a longer
// column, a label column, a zlib blob) may leak into a later one's bytes.
TEST(EventChunk, AReusedEncoderWritesWhatAFreshOneWrites) {
  std::vector<EventChunk> chunks(4);
  chunks[0].events = synthetic_trace(6000, 3);
  chunks[0].labels.assign(chunks[0].events.size(), LabelId{5});
  chunks[1].events = synthetic_trace(200, 4);
  chunks[1].start = {10, 2 << 20, 10, 10};
  chunks[2].events = synthetic_trace(9000, 6);
  chunks[3].events = synthetic_trace(1, 7);
  for (auto& chunk : chunks)
    chunk.series = derive_series(chunk.events, chunk.start);
  chunks[2].series[5].allocated += 512;  // a residual column that is not all zeros
  ChunkEncoder encoder;
  for (const BlobCodec codec : {BlobCodec::zstd, BlobCodec::zlib, BlobCodec::zstd}) {
    for (const auto& chunk : chunks) {
      const auto reused = encoder.encode(chunk, codec);
      const auto fresh = encode_chunk(chunk, codec);
      ASSERT_EQ(std::vector<std::uint8_t>(reused.begin(), reused.end()), fresh);
      const EventChunk decoded = decode_chunk(reused, "reused");
      EXPECT_EQ(decoded.events, chunk.events);
      EXPECT_EQ(decoded.series, chunk.series);
      EXPECT_EQ(decoded.labels, chunk.labels);
    }
  }
}

// The encoder makes room in each column for a batch of events at once: values of the longest
// encoding in every column (10-byte deltas, sizes and residuals, 5-byte stack steps and labels),
// over several batches and in parts as ingest appends them, must fit that room and read back.
TEST(EventChunk, ValuesOfTheLongestEncodingInEveryColumnFitAndReadBack) {
  EventChunk chunk;
  chunk.start = {INT64_MIN, 0, INT64_MAX, -1};
  for (std::size_t i = 0; i < 10'000; ++i) {
    const bool odd = i % 2 == 1;
    chunk.events.push_back({static_cast<TraceAction>(i % kTraceActionCount),
                            odd ? std::uint64_t{1} << 63 : 0, UINT64_MAX,
                            StreamId{odd ? std::uint64_t{1} << 63 : 0}, odd ? INT64_MIN : 0,
                            FrameStackId{odd ? UINT32_MAX : 0}});
    chunk.series.push_back(odd ? SeriesPoint{INT64_MIN, INT64_MAX, INT64_MIN, INT64_MAX}
                               : SeriesPoint{INT64_MAX, INT64_MIN, INT64_MAX, INT64_MIN});
    chunk.labels.push_back(LabelId{UINT32_MAX - static_cast<std::uint32_t>(i % 2)});
  }
  const auto blob = encode_chunk(chunk);
  const EventChunk decoded = decode_chunk(blob, "longest");
  EXPECT_EQ(decoded.start, chunk.start);
  EXPECT_EQ(decoded.events, chunk.events);
  EXPECT_EQ(decoded.series, chunk.series);
  EXPECT_EQ(decoded.labels, chunk.labels);

  // In parts of uneven lengths, the first unlabelled: the same blob, labels 0 before the first
  // labelled part.
  EventChunk unlabelled_start = chunk;
  std::fill_n(unlabelled_start.labels.begin(), 3001, LabelId{});
  ChunkEncoder encoder;
  encoder.begin(chunk.start);
  const std::span<const TraceEvent> events(chunk.events);
  const std::span<const SeriesPoint> series(chunk.series);
  const std::span<const LabelId> labels(chunk.labels);
  encoder.append(events.first(3001), series.first(3001), {});
  encoder.append(events.subspan(3001, 5000), series.subspan(3001, 5000),
                 labels.subspan(3001, 5000));
  encoder.append(events.subspan(8001), series.subspan(8001), labels.subspan(8001));
  const auto parts = encoder.finish();
  EXPECT_EQ(std::vector<std::uint8_t>(parts.begin(), parts.end()), encode_chunk(unlabelled_start));
}

TEST(EventChunk, CorruptBlobsAreErrorsNotCrashes) {
  EventChunk chunk;
  chunk.events = synthetic_trace(3000, 2);
  chunk.series = derive_series(chunk.events);
  const auto blob = encode_chunk(chunk);
  auto truncated = blob;
  truncated.resize(blob.size() - 10);
  EXPECT_THROW(decode_chunk(truncated, "run 1"), DatabaseError);
  auto flipped = blob;
  flipped[blob.size() / 2] ^= 0x5a;
  EXPECT_THROW(decode_chunk(flipped, "run 1"), DatabaseError);
  auto wrong_format = blob;
  wrong_format[0] = 99;
  try {
    decode_chunk(wrong_format, "run 1, events from 0");
    FAIL() << "expected DatabaseError";
  } catch (const DatabaseError& e) {
    EXPECT_NE(std::string(e.what()).find("run 1, events from 0"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("format 99"), std::string::npos);
  }
  EXPECT_THROW(decode_chunk({}, "empty"), DatabaseError);
}

TEST(SegmentMap, TracksSegmentsBlocksAndPendingFrees) {
  SegmentMap map;
  map.apply({TraceAction::segment_alloc, 0x1000, 1 << 20, StreamId{}, 0, FrameStackId{}});
  map.apply({TraceAction::alloc, 0x1000, 512, StreamId{}, 0, FrameStackId{4}});
  map.apply({TraceAction::alloc, 0x1200, 100, StreamId{}, 0, FrameStackId{}});
  map.apply({TraceAction::free_requested, 0x1000, 512, StreamId{}, 0, FrameStackId{}});
  ASSERT_EQ(map.blocks().size(), 2u);
  EXPECT_EQ(map.blocks().at(0x1000).state, BlockState::active_pending_free);
  EXPECT_EQ(map.blocks().at(0x1000).frames, FrameStackId{4});
  map.apply({TraceAction::free_completed, 0x1000, 512, StreamId{}, 0, FrameStackId{}});
  EXPECT_EQ(map.blocks().size(), 1u);
  map.apply({TraceAction::free_completed, 0x9999, 1, StreamId{}, 0, FrameStackId{}});
  EXPECT_EQ(map.unmatched_events(), 1u);
  EXPECT_EQ(map.reserved_bytes(), 1u << 20);
  map.apply({TraceAction::segment_free, 0x1000, 1 << 20, StreamId{}, 0, FrameStackId{}});
  EXPECT_TRUE(map.segments().empty());
}

// Ingest applies each chunk with apply_all: the same blocks, segments and unmatched count as
// apply() event by event, from an empty map and from one holding blocks the events free (a
// trace that starts mid-run), with frees of unknown blocks, repeated frees and re-allocations.
TEST(SegmentMap, ApplyAllIsApplyEventByEvent) {
  std::vector<TraceEvent> events = synthetic_trace(20000, 8);
  // Frees of blocks nobody allocated, a free_completed twice, an address allocated again.
  events.push_back({TraceAction::free_requested, 0xdead000, 64, StreamId{}, 0, FrameStackId{}});
  events.push_back({TraceAction::free_completed, 0xdead000, 64, StreamId{}, 0, FrameStackId{}});
  events.push_back({TraceAction::alloc, 0xbeef000, 64, StreamId{}, 0, FrameStackId{2}});
  events.push_back({TraceAction::free_completed, 0xbeef000, 64, StreamId{}, 0, FrameStackId{}});
  events.push_back({TraceAction::free_completed, 0xbeef000, 64, StreamId{}, 0, FrameStackId{}});
  events.push_back({TraceAction::alloc, 0xbeef000, 128, StreamId{}, 0, FrameStackId{3}});
  for (const std::size_t split : {std::size_t{0}, std::size_t{7000}}) {
    // The state after the first `split` events: blocks live before the rest, which frees some.
    SegmentMap one_by_one;
    for (std::size_t i = 0; i < split; ++i)
      one_by_one.apply(events[i]);
    SegmentMap batched = one_by_one;
    for (std::size_t i = split; i < events.size(); ++i)
      one_by_one.apply(events[i]);
    batched.apply_all(std::span(events).subspan(split));
    EXPECT_EQ(batched, one_by_one) << "from event " << split;
    EXPECT_EQ(batched.unmatched_events(), one_by_one.unmatched_events());
    EXPECT_EQ(batched.blocks(), one_by_one.blocks());
  }
  // Chunk after chunk, as ingest applies them (one change table, kept from chunk to chunk).
  SegmentMap one_by_one;
  SegmentMap chunked;
  for (const TraceEvent& event : events)
    one_by_one.apply(event);
  for (std::size_t first = 0; first < events.size(); first += 3000)
    chunked.apply_all(
        std::span(events).subspan(first, std::min<std::size_t>(3000, events.size() - first)));
  EXPECT_EQ(chunked, one_by_one);
  EXPECT_EQ(chunked.blocks(), one_by_one.blocks());
}

// A map's batches keep an index of the blocks they find in the ordered map; every other change
// of the map (apply, unapply, add_block, a copy or an assignment) between batches must reach it,
// or a later batch misses a block that is there or finds one that is gone.
TEST(SegmentMap, BatchesBetweenOneEventChangesAndCopiesAreApplyEventByEvent) {
  const std::vector<TraceEvent> events = synthetic_trace(40000, 21);
  SegmentMap one_by_one;
  SegmentMap mixed;
  auto both_apply = [&](std::size_t first, std::size_t last, bool batch) {
    for (std::size_t i = first; i < last; ++i)
      one_by_one.apply(events[i]);
    if (batch) {
      mixed.apply_all(std::span(events).subspan(first, last - first));
    } else {
      for (std::size_t i = first; i < last; ++i)
        mixed.apply(events[i]);
    }
  };
  both_apply(0, 5000, true);
  both_apply(5000, 9000, false);  // allocs and frees the index has not seen
  both_apply(9000, 14000, true);
  // A block added by hand, then freed by a batch; one the batch never frees.
  const LiveBlock added{0x5eed000, 256, StreamId{}, BlockState::active_allocated, FrameStackId{7}};
  const LiveBlock kept{0x5eee000, 512, StreamId{}, BlockState::active_allocated, FrameStackId{8}};
  for (SegmentMap* map : {&one_by_one, &mixed}) {
    map->add_block(added);
    map->add_block(kept);
  }
  std::vector<TraceEvent> frees = {
      {TraceAction::free_requested, added.addr, added.size, StreamId{}, 0, FrameStackId{}},
      {TraceAction::free_completed, added.addr, added.size, StreamId{}, 0, FrameStackId{}}};
  for (const TraceEvent& event : frees)
    one_by_one.apply(event);
  mixed.apply_all(frees);
  // Undone one by one, then walked forward again in a batch.
  for (std::size_t i = 14000; i-- > 12000;) {
    one_by_one.unapply(events[i]);
    mixed.unapply(events[i]);
  }
  both_apply(12000, 20000, true);
  EXPECT_EQ(mixed, one_by_one);
  // A copy batches on its own; an assignment takes the other map's blocks.
  SegmentMap copy = mixed;
  for (std::size_t i = 20000; i < 30000; ++i)
    one_by_one.apply(events[i]);
  copy.apply_all(std::span(events).subspan(20000, 10000));
  EXPECT_EQ(copy, one_by_one);
  mixed = copy;
  both_apply(30000, 35000, true);
  EXPECT_EQ(mixed, one_by_one);
  EXPECT_EQ(mixed.blocks().at(kept.addr), kept);
  EXPECT_FALSE(mixed.blocks().contains(added.addr));
  // A block at address 0 (kept beside the hash tables) allocated by one batch, freed by the next;
  // then the map moved, batching on.
  const std::vector<TraceEvent> at_zero = {
      {TraceAction::alloc, 0, 64, StreamId{}, 0, FrameStackId{9}},
      {TraceAction::free_requested, 0, 64, StreamId{}, 0, FrameStackId{}},
      {TraceAction::free_completed, 0, 64, StreamId{}, 0, FrameStackId{}}};
  one_by_one.apply(at_zero[0]);
  mixed.apply_all(std::span(at_zero).first(1));
  ASSERT_TRUE(mixed.blocks().contains(0));
  one_by_one.apply(at_zero[1]);
  one_by_one.apply(at_zero[2]);
  mixed.apply_all(std::span(at_zero).subspan(1));
  SegmentMap moved = std::move(mixed);
  for (std::size_t i = 35000; i < events.size(); ++i)
    one_by_one.apply(events[i]);
  moved.apply_all(std::span(events).subspan(35000));
  EXPECT_EQ(moved, one_by_one);
  EXPECT_FALSE(moved.blocks().contains(0));
  // Walked back by a batch after the batches forward, as one by one.
  const auto walked = std::span(events).subspan(25000);
  moved.unapply_all(snapshot::TraceBlocks(walked));
  for (std::size_t i = walked.size(); i-- > 0;)
    one_by_one.unapply(walked[i]);
  EXPECT_EQ(moved, one_by_one);
}

TEST(SegmentMap, ExpandableRangesMergeAndSplit) {
  SegmentMap map;
  const std::uint64_t base = 0x7f0000000000;
  const std::uint64_t page = 20 << 20;
  map.apply({TraceAction::segment_map, base, page, StreamId{}, 0, FrameStackId{}});
  map.apply({TraceAction::segment_map, base + page, 2 * page, StreamId{}, 0, FrameStackId{}});
  ASSERT_EQ(map.segments().size(), 1u);
  EXPECT_EQ(map.segments().begin()->second.size, 3 * page);
  EXPECT_TRUE(map.segments().begin()->second.expandable);
  map.apply({TraceAction::segment_unmap, base + page, page, StreamId{}, 0, FrameStackId{}});
  ASSERT_EQ(map.segments().size(), 2u);
  EXPECT_EQ(map.segments().at(base).size, page);
  EXPECT_EQ(map.segments().at(base + 2 * page).size, page);
  map.apply({TraceAction::segment_map, base + page, page, StreamId{}, 0, FrameStackId{}});
  ASSERT_EQ(map.segments().size(), 1u);
  EXPECT_EQ(map.reserved_bytes(), 3 * page);
}

TEST(SegmentMap, SerializeRoundTripsAndRejectsCorruption) {
  SegmentMap map;
  for (const auto& event : synthetic_trace(20000, 8))
    map.apply(event);
  ASSERT_FALSE(map.blocks().empty());
  const auto blob = map.serialize();
  EXPECT_EQ(SegmentMap::deserialize(blob, "keyframe"), map);
  auto truncated = blob;
  truncated.resize(blob.size() - 3);
  EXPECT_THROW(SegmentMap::deserialize(truncated, "keyframe"), DatabaseError);
}

}  // namespace
}  // namespace fragscope::storage

namespace fragscope::storage {
namespace {

TEST(SegmentMap, RewindingTheFinalStateGivesTheStartingState) {
  auto events = test::synthetic_trace(30'000, 17);
  // A free does not say which stack allocated the block, so rewinding cannot restore stacks of
  // blocks freed during the trace; compare without stacks.
  for (auto& event : events)
    event.frames = FrameStackId{};
  // A trace that began after 10k events had happened: rewinding its final state through the
  // recorded 20k events must give the state at event 10k.
  SegmentMap full;
  SegmentMap at_start;
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (i == 10'000)
      at_start = full;
    full.apply(events[i]);
  }
  const auto recorded = std::span(events).subspan(10'000);
  EXPECT_EQ(rewind(full, recorded), SegmentMap(at_start.segments(), at_start.blocks()));
  EXPECT_EQ(rewind(full, events), SegmentMap());
}

TEST(SegmentMap, UnapplyAllUndoesEventsAsUnapplyDoesOneByOne) {
  // Past several of unapply_all's windows, from a state with blocks live before the events
  // (their frees find a block to mark or none at all).
  const auto events = test::synthetic_trace(60'000, 29);
  SegmentMap final_state;
  for (const auto& event : events)
    final_state.apply(event);
  const auto walked = std::span(events).subspan(7'000);
  SegmentMap one_by_one = final_state;
  for (std::size_t i = walked.size(); i-- > 0;)
    one_by_one.unapply(walked[i]);
  SegmentMap all = final_state;
  all.unapply_all(snapshot::TraceBlocks(walked));
  ASSERT_FALSE(one_by_one.blocks().empty());
  EXPECT_EQ(all, one_by_one);
}

TEST(SegmentMap, RewindHandlesExpandableRanges) {
  const std::uint64_t base = 0x7f0000000000;
  const std::uint64_t page = 2 << 20;
  const std::vector<TraceEvent> events = {
      {TraceAction::segment_map, base + page, page, StreamId{}, 0, FrameStackId{}},
      {TraceAction::segment_unmap, base, page, StreamId{}, 0, FrameStackId{}}};
  SegmentMap before;
  before.apply({TraceAction::segment_map, base, page, StreamId{}, 0, FrameStackId{}});
  SegmentMap after = before;
  for (const auto& event : events)
    after.apply(event);
  EXPECT_EQ(rewind(after, events), before);
}

}  // namespace
}  // namespace fragscope::storage
