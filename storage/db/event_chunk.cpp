#include "storage/db/event_chunk.h"

#include <algorithm>
#include <array>
#include <memory>

#include "storage/db/packing.h"

namespace fragscope::storage {
namespace {

// Format 2 adds the mask of all-zero columns, format 3 the requested-bytes residual; chunks of
// formats 1 and 2 still read (their requested series is the trace-derived one).
constexpr std::uint8_t kChunkFormat = 3;
constexpr std::uint64_t kHasLabels = 1;

enum Column : std::size_t {
  kAction,
  kAddress,
  kSize,
  kStream,
  kTime,
  kFrames,
  kLabel,
  kResidualAllocated,
  kResidualReserved,
  kResidualActive,
  kResidualRequested,
  kColumnCount
};

// The most bytes a varint of a label (32 bits) or of the step between two 32-bit stack ids takes;
// a 64-bit value's is kMaxVarintBytes.
constexpr std::size_t kMaxVarint33Bytes = 5;
// Events packed a column at a time: room for this many is made in each column at once, and the
// room a batch may need stays small (40 KiB a column).
constexpr std::size_t kEventsPerBatch = 4096;

constexpr bool is_residual(std::size_t column) {
  return column >= kResidualAllocated && column <= kResidualRequested;
}

// Appends `count` varint zeros to `column`.
void put_zeros(ByteColumn& column, std::size_t count) {
  std::uint8_t* at = column.room(count);
  std::fill_n(at, count, std::uint8_t{0});
  column.commit(at + count);
}

// Appends `count` zeros to each residual column.
void put_residual_zeros(std::span<ByteColumn> columns, std::size_t count) {
  for (std::size_t c = kResidualAllocated; c <= kResidualRequested; ++c)
    put_zeros(columns[c], count);
}

}  // namespace

std::vector<SeriesPoint> derive_series(std::span<const TraceEvent> events, SeriesPoint start) {
  std::vector<SeriesPoint> series;
  series.reserve(events.size());
  SeriesPoint current = start;
  for (const auto& event : events) {
    current = plus(current, trace_delta(event));
    series.push_back(current);
  }
  return series;
}

std::vector<std::uint8_t> encode_chunk(const EventChunk& chunk, BlobCodec codec) {
  ChunkEncoder encoder;
  const auto blob = encoder.encode(chunk, codec);
  return {blob.begin(), blob.end()};
}

std::span<const std::uint8_t> ChunkEncoder::encode(const EventChunk& chunk, BlobCodec codec) {
  begin(chunk.start);
  append(chunk.events, chunk.series, chunk.labels);
  return finish(codec);
}

void ChunkEncoder::begin(const SeriesPoint& start) {
  for (auto& column : columns_)
    column.clear();
  start_ = start;
  count_ = 0;
  has_labels_ = false;
  has_residuals_ = false;
  previous_addr_ = 0;
  previous_stream_ = 0;
  previous_time_ = 0;
  previous_frames_ = 0;
  previous_ = start;
}

void ChunkEncoder::append(std::span<const TraceEvent> events, std::span<const SeriesPoint> series,
                          std::span<const LabelId> labels, SeriesSource source) {
  static_assert(kColumns == kColumnCount);
  auto& out = columns_;
  if (!labels.empty() && !has_labels_) {
    put_zeros(out[kLabel], count_);  // the chunk's events before its first labelled part
    has_labels_ = true;
  }
  if (source == SeriesSource::producer && !has_residuals_) {
    put_residual_zeros(out, count_);  // the chunk's events before, all derived
    has_residuals_ = true;
  }
  for (std::size_t first = 0; first < events.size(); first += kEventsPerBatch) {
    const std::size_t n = std::min(kEventsPerBatch, events.size() - first);
    append_batch(events.subspan(first, n), series.subspan(first, n),
                 labels.empty() ? labels : labels.subspan(first, n), source);
  }
  count_ += events.size();
}

void ChunkEncoder::append_batch(std::span<const TraceEvent> events,
                                std::span<const SeriesPoint> series,
                                std::span<const LabelId> labels, SeriesSource source) {
  // A column at a time: each loop keeps its output and the previous value in registers.
  auto& out = columns_;
  const std::size_t n = events.size();
  {
    std::uint8_t* at = out[kAction].room(n);
    for (const TraceEvent& event : events)
      *at++ = static_cast<std::uint8_t>(event.action);
    out[kAction].commit(at);
  }
  // The column of field(event) as signed steps from the previous event's.
  const auto steps = [&](ByteColumn& column, auto previous, auto field, std::size_t max_bytes) {
    std::uint8_t* at = column.room(n * max_bytes);
    for (const TraceEvent& event : events) {
      const auto value = field(event);
      at = put_signed(at, static_cast<std::int64_t>(value - previous));
      previous = value;
    }
    column.commit(at);
  };
  steps(
      out[kAddress], previous_addr_, [](const TraceEvent& e) { return e.addr; }, kMaxVarintBytes);
  {
    std::uint8_t* at = out[kSize].room(n * kMaxVarintBytes);
    for (const TraceEvent& event : events)
      at = put_varint(at, event.size);
    out[kSize].commit(at);
  }
  steps(
      out[kStream], previous_stream_, [](const TraceEvent& e) { return e.stream.value; },
      kMaxVarintBytes);
  // Wrapping like every stored delta: unsigned.
  steps(
      out[kTime], static_cast<std::uint64_t>(previous_time_),
      [](const TraceEvent& e) { return static_cast<std::uint64_t>(e.time_us); }, kMaxVarintBytes);
  steps(
      out[kFrames], static_cast<std::int64_t>(previous_frames_),
      [](const TraceEvent& e) { return static_cast<std::int64_t>(e.frames.value); },
      kMaxVarint33Bytes);
  if (has_labels_) {
    std::uint8_t* at = out[kLabel].room(n * kMaxVarint33Bytes);
    for (std::size_t i = 0; i < n; ++i)
      at = put_varint(at, labels.empty() ? 0 : labels[i].value);
    out[kLabel].commit(at);
  }
  if (source == SeriesSource::derived) {
    if (has_residuals_)
      put_residual_zeros(out, n);
  } else {
    // Only what the trace alone cannot predict is stored: zero for trace-derived series.
    std::uint8_t* allocated = out[kResidualAllocated].room(n * kMaxVarintBytes);
    std::uint8_t* reserved = out[kResidualReserved].room(n * kMaxVarintBytes);
    std::uint8_t* active = out[kResidualActive].room(n * kMaxVarintBytes);
    std::uint8_t* requested = out[kResidualRequested].room(n * kMaxVarintBytes);
    SeriesPoint previous = previous_;
    for (std::size_t i = 0; i < n; ++i) {
      const SeriesPoint predicted = plus(previous, trace_delta(events[i]));
      const SeriesPoint actual = series[i];  // a copy: the stores below may alias series[i]
      allocated = put_signed(allocated, wrapping_sub(actual.allocated, predicted.allocated));
      reserved = put_signed(reserved, wrapping_sub(actual.reserved, predicted.reserved));
      active = put_signed(active, wrapping_sub(actual.active, predicted.active));
      requested = put_signed(requested, wrapping_sub(actual.requested, predicted.requested));
      previous = actual;
    }
    out[kResidualAllocated].commit(allocated);
    out[kResidualReserved].commit(reserved);
    out[kResidualActive].commit(active);
    out[kResidualRequested].commit(requested);
  }
  if (n != 0) {
    const TraceEvent& last = events.back();
    previous_addr_ = last.addr;
    previous_stream_ = last.stream.value;
    previous_time_ = last.time_us;
    previous_frames_ = last.frames.value;
    previous_ = series.back();
  }
}

std::span<const std::uint8_t> ChunkEncoder::finish(BlobCodec codec) {
  const std::size_t count = count_;
  const bool has_labels = has_labels_;
  // A column of zeros (no stacks, one stream, trace-derived series) is left out entirely: less
  // for the codec to chew through.
  std::uint64_t zero_columns = 0;
  for (std::size_t c = kAddress; c < kColumnCount; ++c) {
    const auto bytes = columns_[c].bytes();
    if (is_residual(c) && !has_residuals_) {
      zero_columns |= std::uint64_t{1} << c;  // every series derived: no residual written
      continue;
    }
    if (bytes.size() == count &&
        std::all_of(bytes.begin(), bytes.end(), [](std::uint8_t byte) { return byte == 0; })) {
      zero_columns |= std::uint64_t{1} << c;
      columns_[c].clear();
    }
  }

  payload_.clear();
  for (const auto& column : columns_)
    put_varint(payload_, column.bytes().size());
  for (const auto& column : columns_)
    payload_.insert(payload_.end(), column.bytes().begin(), column.bytes().end());

  blob_.clear();
  blob_.push_back(kChunkFormat);
  put_varint(blob_, count);
  put_varint(blob_, has_labels ? kHasLabels : 0);
  put_varint(blob_, zero_columns);
  put_signed(blob_, start_.allocated);
  put_signed(blob_, start_.reserved);
  put_signed(blob_, start_.active);
  put_signed(blob_, start_.requested);
  put_varint(blob_, payload_.size());
  compressor_.append(payload_, codec, blob_);
  return blob_;
}

ChunkReader::ChunkReader(std::span<const std::uint8_t> blob, const std::string& what) {
  ByteReader header(blob, what);
  const auto format = header.byte();
  if (format != 1 && format != kChunkFormat)
    header.fail("unknown event chunk format " + std::to_string(format));
  const std::uint64_t count = header.varint();
  if (count > kEventsPerChunk)
    header.fail("chunk claims " + std::to_string(count) + " events");
  has_labels_ = (header.varint() & kHasLabels) != 0;
  const std::uint64_t zero_columns = format >= 2 ? header.varint() : 0;
  start_.allocated = header.signed_varint();
  start_.reserved = header.signed_varint();
  start_.active = header.signed_varint();
  start_.requested = format >= 3 ? header.signed_varint() : start_.active;
  const std::uint64_t payload_size = header.varint();
  if (payload_size > count * 128 + 1024)
    header.fail("implausible payload size");
  payload_ =
      inflate_bytes(header.take(header.remaining()), static_cast<std::size_t>(payload_size), what);

  ByteReader body(payload_, what);
  // Older formats have fewer columns; the missing ones read as zeros.
  const std::size_t stored_columns = format >= 3 ? kColumnCount : kColumnCount - 1;
  std::uint64_t zeros = zero_columns;
  std::array<std::uint64_t, kColumnCount> sizes{};
  for (std::size_t c = 0; c < stored_columns; ++c)
    sizes[c] = body.varint();
  for (std::size_t c = stored_columns; c < kColumnCount; ++c)
    zeros |= std::uint64_t{1} << c;
  // A left-out column reads as `count` zero values.
  static const std::vector<std::uint8_t> kZeros(kEventsPerChunk, 0);
  static_assert(kColumns == kColumnCount);
  columns_.reserve(kColumnCount);
  for (std::size_t c = 0; c < kColumnCount; ++c) {
    if ((zeros >> c) & 1) {
      if (sizes[c] != 0)
        body.fail("a left-out column has bytes");
      columns_.emplace_back(std::span(kZeros).first(static_cast<std::size_t>(count)), what);
    } else {
      columns_.emplace_back(body.take(sizes[c]), what);
    }
  }
  count_ = static_cast<std::size_t>(count);
  if (count_ == 0)
    check_columns_end();
}

void ChunkReader::check_columns_end() const {
  for (const auto& column : columns_) {
    if (!column.at_end())
      column.fail("column longer than its events");
  }
}

void ChunkReader::next(TraceEvent& event, LabelId& label, SeriesPoint& residual) {
  auto& columns = columns_;
  const std::uint8_t action = columns[kAction].byte();
  if (action >= kTraceActionCount)
    columns[kAction].fail("unknown action " + std::to_string(action));
  event.action = static_cast<TraceAction>(action);
  addr_ += static_cast<std::uint64_t>(columns[kAddress].signed_varint());
  event.addr = addr_;
  event.size = columns[kSize].varint();
  stream_ += static_cast<std::uint64_t>(columns[kStream].signed_varint());
  event.stream = StreamId{stream_};
  time_ = wrapping_add(time_, columns[kTime].signed_varint());
  event.time_us = time_;
  frames_ += columns[kFrames].signed_varint();
  event.frames = FrameStackId{static_cast<std::uint32_t>(frames_)};
  label = LabelId{has_labels_ ? static_cast<std::uint32_t>(columns[kLabel].varint()) : 0};
  residual.allocated = columns[kResidualAllocated].signed_varint();
  residual.reserved = columns[kResidualReserved].signed_varint();
  residual.active = columns[kResidualActive].signed_varint();
  residual.requested = columns[kResidualRequested].signed_varint();
  if (++position_ == count_)
    check_columns_end();
}

std::size_t ChunkReader::read(std::size_t count, std::vector<TraceEvent>& out) {
  const std::size_t n = std::min(count, count_ - position_);
  TraceEvent event;
  LabelId label;
  SeriesPoint residual;
  for (std::size_t i = 0; i < n; ++i) {
    next(event, label, residual);
    out.push_back(event);
  }
  return n;
}

namespace {

// Reads every column of a chunk, so that a corrupt one is a DatabaseError wherever it is:
// on_start(count, has_labels, start) first, then on_event(index, event, label, residuals) for each
// event in order (residuals: what the stored series adds to the trace-derived one).
template <typename OnStart, typename OnEvent>
void read_chunk(std::span<const std::uint8_t> blob, const std::string& what, OnStart&& on_start,
                OnEvent&& on_event) {
  ChunkReader reader(blob, what);
  on_start(reader.count(), reader.has_labels(), reader.start());
  TraceEvent event;
  LabelId label;
  SeriesPoint residual;
  for (std::size_t i = 0; i < reader.count(); ++i) {
    reader.next(event, label, residual);
    on_event(i, event, label, residual);
  }
}

}  // namespace

EventChunk decode_chunk(std::span<const std::uint8_t> blob, const std::string& what) {
  EventChunk chunk;
  SeriesPoint previous;
  read_chunk(
      blob, what,
      [&](std::size_t count, bool has_labels, const SeriesPoint& start) {
        chunk.start = start;
        previous = start;
        chunk.events.resize(count);
        chunk.series.resize(count);
        if (has_labels)
          chunk.labels.resize(count);
      },
      [&](std::size_t i, const TraceEvent& event, LabelId label, const SeriesPoint& residual) {
        chunk.events[i] = event;
        if (!chunk.labels.empty())
          chunk.labels[i] = label;
        const SeriesPoint predicted = plus(previous, trace_delta(event));
        SeriesPoint& actual = chunk.series[i];
        actual.allocated = wrapping_add(predicted.allocated, residual.allocated);
        actual.reserved = wrapping_add(predicted.reserved, residual.reserved);
        actual.active = wrapping_add(predicted.active, residual.active);
        actual.requested = wrapping_add(predicted.requested, residual.requested);
        previous = actual;
      });
  return chunk;
}

void decode_chunk_events(std::span<const std::uint8_t> blob, const std::string& what,
                         std::size_t first, std::size_t end, std::vector<TraceEvent>& out) {
  read_chunk(
      blob, what, [](std::size_t, bool, const SeriesPoint&) {},
      [&](std::size_t i, const TraceEvent& event, LabelId, const SeriesPoint&) {
        if (i >= first && i < end)
          out.push_back(event);
      });
}

}  // namespace fragscope::storage
