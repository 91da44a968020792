#pragma once
// Events on disk: up to kEventsPerChunk consecutive events of a run in one blob of packed
// columns (action, address delta, size, stream delta, time delta, stack, label, series
// residuals), zstd-compressed (zlib in databases written before zstd). Column order groups like
// values, so a chunk of a real trace costs well under 16 bytes per event, and each chunk decodes
// on its own.
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/core/strong_id.h"
#include "engine/core/trace.h"
#include "storage/db/packing.h"

namespace fragscope::storage {

inline constexpr std::size_t kEventsPerChunk = 65536;

// The memory series a timeline plots, as they stand after an event (bytes), with PyTorch's
// memory_stats() meanings: allocated_bytes, reserved_bytes, active_bytes, requested_bytes. A
// producer that knows block sizes (the allocator model, the snapshot timeline) passes them
// exactly; derived from a trace alone, allocated and active count request sizes (see trace_delta).
struct SeriesPoint {
  std::int64_t allocated = 0;
  std::int64_t reserved = 0;
  std::int64_t active = 0;
  std::int64_t requested = 0;
  friend bool operator==(const SeriesPoint&, const SeriesPoint&) = default;
};

// a + b per series, wrapping modulo 2^64 like every stored delta: hostile sizes near 2^63 must
// not overflow signed arithmetic. Inline, like trace_delta, series_max and series_min: ingest
// calls them for every event.
inline SeriesPoint plus(const SeriesPoint& a, const SeriesPoint& b) {
  return {wrapping_add(a.allocated, b.allocated), wrapping_add(a.reserved, b.reserved),
          wrapping_add(a.active, b.active), wrapping_add(a.requested, b.requested)};
}
inline SeriesPoint series_max(const SeriesPoint& a, const SeriesPoint& b) {
  return {std::max(a.allocated, b.allocated), std::max(a.reserved, b.reserved),
          std::max(a.active, b.active), std::max(a.requested, b.requested)};
}
inline SeriesPoint series_min(const SeriesPoint& a, const SeriesPoint& b) {
  return {std::min(a.allocated, b.allocated), std::min(a.reserved, b.reserved),
          std::min(a.active, b.active), std::min(a.requested, b.requested)};
}

// What an event does to the series when only the trace is known: allocated, active and
// requested move by the request size (PyTorch traces record unrounded sizes), reserved by the
// segment size. allocated drops at free_requested, active and requested at free_completed
// (torch-allocator-spec §4). reserved and requested are then exact; allocated and active are
// the request-size view of PyTorch's rounded counters.
inline SeriesPoint trace_delta(const TraceEvent& event) {
  const auto size = static_cast<std::int64_t>(event.size);
  const std::int64_t minus = wrapping_neg(size);
  switch (event.action) {
    case TraceAction::alloc:
      return {size, 0, size, size};
    case TraceAction::free_requested:
      return {minus, 0, 0, 0};
    case TraceAction::free_completed:
      return {0, 0, minus, minus};
    case TraceAction::segment_alloc:
    case TraceAction::segment_map:
      return {0, size, 0, 0};
    case TraceAction::segment_free:
    case TraceAction::segment_unmap:
      return {0, minus, 0, 0};
    case TraceAction::snapshot:
    case TraceAction::oom:
      break;
  }
  return {};
}

// The series after each event, starting from `start`, computed with trace_delta().
std::vector<SeriesPoint> derive_series(std::span<const TraceEvent> events, SeriesPoint start = {});

struct EventChunk {
  SeriesPoint start;                // the series before the first event
  std::vector<TraceEvent> events;   // at most kEventsPerChunk
  std::vector<SeriesPoint> series;  // one per event: the series after it
  std::vector<LabelId> labels;      // empty (no labels) or one per event
};

// `codec`: zstd for everything stored; zlib only to compare codecs and to write old-format blobs in
// tests (decode_chunk reads both).
std::vector<std::uint8_t> encode_chunk(const EventChunk& chunk, BlobCodec codec = BlobCodec::zstd);

// encode_chunk with its buffers (the packed columns, the payload, the blob) and its compressor
// kept from chunk to chunk: ingest encodes one 64k-event chunk after another, and fresh buffers
// for each were fresh pages to fault in. The same bytes as encode_chunk.
//
// A chunk also goes in piece by piece, in order: begin(), append() for each run of its events,
// finish(). Ingest hands a chunk over a part at a time so that a whole 64k-event chunk of events
// and series (~4.7 MB unpacked) is never held twice; its packed columns are the chunk's only copy.
class ChunkEncoder {
 public:
  // The blob of `chunk`, valid until the next encode(), begin() or finish().
  std::span<const std::uint8_t> encode(const EventChunk& chunk, BlobCodec codec = BlobCodec::zstd);

  // Starts a chunk whose series before its first event is `start`.
  void begin(const SeriesPoint& start);
  // Where a part's series come from. `derived` promises that each point is
  // plus(the point before, trace_delta(its event)), chained from begin()'s start through the
  // parts before: its residuals are then zero, and are not computed (nor checked).
  enum class SeriesSource : std::uint8_t { producer, derived };
  // The chunk's next events, the series after each, and their labels (empty: unlabelled). Once
  // any part is labelled the chunk is: the events before it and the unlabelled ones after read 0.
  void append(std::span<const TraceEvent> events, std::span<const SeriesPoint> series,
              std::span<const LabelId> labels, SeriesSource source = SeriesSource::producer);
  std::size_t count() const { return count_; }
  // The blob of the events appended since begin(), valid until the next encode(), begin() or
  // finish().
  std::span<const std::uint8_t> finish(BlobCodec codec = BlobCodec::zstd);

 private:
  // append() of up to event_chunk.cpp's kEventsPerBatch events.
  void append_batch(std::span<const TraceEvent> events, std::span<const SeriesPoint> series,
                    std::span<const LabelId> labels, SeriesSource source);

  static constexpr std::size_t kColumns = 11;
  std::array<ByteColumn, kColumns> columns_;  // written a column at a time (append_batch)
  // The chunk being encoded: its start, events so far and the last event's fields (columns hold
  // deltas from them).
  SeriesPoint start_;
  std::size_t count_ = 0;
  bool has_labels_ = false;
  // The residual columns hold a value per event once a part with producer series came; until
  // then every residual is zero and the columns stay empty.
  bool has_residuals_ = false;
  std::uint64_t previous_addr_ = 0;
  std::uint64_t previous_stream_ = 0;
  std::int64_t previous_time_ = 0;
  std::uint32_t previous_frames_ = 0;
  SeriesPoint previous_;
  std::vector<std::uint8_t> payload_;
  std::vector<std::uint8_t> blob_;
  Compressor compressor_;
};
// A chunk's events decoded one after another, for readers that go forward through a run (the
// stats keyframes an import stores read it 8k events at a time, and decoded each 64k-event chunk
// eight times over when every window decoded its chunk from the start). Holds the chunk's
// inflated columns only (~10-15 bytes an event), not its decoded events.
//
// `what` names the blob in errors. A corrupt header is a DatabaseError from the constructor; a
// corrupt column one from the read that reaches it, and a column longer than its events one from
// the read of the chunk's last event, so that a chunk read to its end is checked as decode_chunk
// checks it.
class ChunkReader {
 public:
  ChunkReader(std::span<const std::uint8_t> blob, const std::string& what);
  // Its column readers point into its own payload: moved along with it, never copied.
  ChunkReader(ChunkReader&&) = default;
  ChunkReader& operator=(ChunkReader&&) = default;

  std::size_t count() const { return count_; }
  bool has_labels() const { return has_labels_; }
  const SeriesPoint& start() const { return start_; }
  // Events read so far; the next read starts at this index within the chunk.
  std::size_t position() const { return position_; }
  // The next event, its label (0 when unlabelled) and its series residual (what the stored series
  // adds to the trace-derived one). Only while position() < count().
  void next(TraceEvent& event, LabelId& label, SeriesPoint& residual);
  // Appends the next min(count, count() - position()) events to `out`; returns how many.
  std::size_t read(std::size_t count, std::vector<TraceEvent>& out);

 private:
  static constexpr std::size_t kColumns = 11;
  void check_columns_end() const;

  std::size_t count_ = 0;
  bool has_labels_ = false;
  SeriesPoint start_;
  std::vector<std::uint8_t> payload_;  // the inflated columns, which columns_ read
  std::vector<ByteReader> columns_;    // one per column, in the order they are stored
  std::size_t position_ = 0;
  // The last event's fields: columns hold deltas from them.
  std::uint64_t addr_ = 0;
  std::uint64_t stream_ = 0;
  std::int64_t time_ = 0;
  std::int64_t frames_ = 0;
};

// `what` names the blob in errors, e.g. "run 3, events 65536..": a corrupt blob is a
// DatabaseError, never undefined behaviour.
EventChunk decode_chunk(std::span<const std::uint8_t> blob, const std::string& what);
// The events [first, end) of a chunk (indices within it) appended to `out`, with no EventChunk
// made: a reader of a few thousand events held the chunk's 64k events and series (4.7 MB) to copy
// them. Every column is still read, so a corrupt blob is the same DatabaseError.
void decode_chunk_events(std::span<const std::uint8_t> blob, const std::string& what,
                         std::size_t first, std::size_t end, std::vector<TraceEvent>& out);

}  // namespace fragscope::storage
