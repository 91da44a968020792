// RunReader: a run's events, series, labels, stacks, timelines and the segment state at any
// event, from the stored chunks and keyframes. Memory by category is in run_categories.cpp, the
// recorded environment in run_environment.cpp.
#include "storage/db/run_reader.h"

#include <algorithm>
#include <optional>
#include <string>
#include <unordered_map>

#include "storage/db/packing.h"
#include "storage/db/run_store_internal.h"

namespace fragscope::storage {

using run_store_detail::category_from_string;
using run_store_detail::parse_json;

std::uint64_t RunReader::event_count(RunId run) {
  auto query = db_.prepare("SELECT event_count FROM runs WHERE id = ?");
  query.bind_int(1, run.value);
  if (!query.step())
    throw DatabaseError(db_.path() + ": no run with id " + std::to_string(run.value));
  return static_cast<std::uint64_t>(query.column_int(0));
}

namespace {

std::string chunk_name(const Database& db, RunId run, std::uint64_t chunk_first) {
  return db.path() + ": run " + std::to_string(run.value) + ", events from " +
         std::to_string(chunk_first);
}

}  // namespace

Statement RunReader::chunk_query(RunId run, std::uint64_t chunk_first) {
  auto query = db_.prepare("SELECT data FROM event_chunks WHERE run_id = ? AND first_event = ?");
  query.bind_int(1, run.value).bind_int(2, static_cast<std::int64_t>(chunk_first));
  if (!query.step())
    throw DatabaseError(db_.path() + ": run " + std::to_string(run.value) +
                        " has no event chunk at event " + std::to_string(chunk_first));
  return query;
}

EventChunk RunReader::load_chunk(RunId run, std::uint64_t chunk_first) {
  auto query = chunk_query(run, chunk_first);
  return decode_chunk(query.column_blob(0), chunk_name(db_, run, chunk_first));
}

ChunkReader RunReader::read_chunk(RunId run, std::uint64_t chunk_first) {
  auto query = chunk_query(run, chunk_first);
  return ChunkReader(query.column_blob(0), chunk_name(db_, run, chunk_first));
}

RunReader::EventStream RunReader::event_stream(RunId run, std::uint64_t first) {
  return EventStream(*this, run, first);
}

RunReader::EventStream::EventStream(RunReader& reader, RunId run, std::uint64_t first)
    : reader_(reader), run_(run), end_(reader.event_count(run)) {
  next_ = std::min(first, end_);
}

std::size_t RunReader::EventStream::read(std::size_t count, std::vector<TraceEvent>& out) {
  std::size_t done = 0;
  while (done < count && next_ < end_) {
    const std::uint64_t chunk_first = next_ - next_ % kEventsPerChunk;
    if (!chunk_ || chunk_->position() == chunk_->count()) {
      chunk_.reset();
      chunk_.emplace(reader_.read_chunk(run_, chunk_first));
      // A stream that starts inside a chunk decodes the events before its first, keeping none.
      TraceEvent skipped;
      LabelId label;
      SeriesPoint residual;
      while (chunk_->position() < std::min<std::uint64_t>(next_ - chunk_first, chunk_->count()))
        chunk_->next(skipped, label, residual);
    }
    const std::size_t got = chunk_->read(
        static_cast<std::size_t>(std::min<std::uint64_t>(count - done, end_ - next_)), out);
    if (got == 0)
      throw DatabaseError(chunk_name(reader_.db_, run_, chunk_first) + ": the chunk holds " +
                          std::to_string(chunk_->count()) + " events, the run has " +
                          std::to_string(end_));
    done += got;
    next_ += got;
  }
  return done;
}

std::vector<EventChunk> RunReader::load_chunks(RunId run, std::uint64_t first, std::uint64_t end) {
  // Chunks are aligned to kEventsPerChunk, so the ones covering [first, end) are known.
  std::vector<EventChunk> chunks;
  if (end <= first)
    return chunks;
  auto query = run_store_detail::chunks_covering(db_, "event_chunks", run, first, end);
  while (query.step()) {
    chunks.push_back(
        decode_chunk(query.column_blob(1),
                     chunk_name(db_, run, static_cast<std::uint64_t>(query.column_int(0)))));
  }
  return chunks;
}

std::vector<TraceEvent> RunReader::events(RunId run, std::uint64_t first, std::uint64_t end) {
  end = std::min(end, event_count(run));
  std::vector<TraceEvent> out;
  if (end <= first)
    return out;
  out.reserve(static_cast<std::size_t>(end - first));
  // A chunk at a time, its events only: the stats keyframes an import stores read 12k events at a
  // time, and held the one or two whole chunks those fall in (up to 9.4 MB: an import's peak).
  auto query = run_store_detail::chunks_covering(db_, "event_chunks", run, first, end);
  while (query.step()) {
    const auto chunk_first = static_cast<std::uint64_t>(query.column_int(0));
    decode_chunk_events(query.column_blob(1), chunk_name(db_, run, chunk_first),
                        static_cast<std::size_t>(std::max(first, chunk_first) - chunk_first),
                        static_cast<std::size_t>(end - chunk_first), out);
  }
  return out;
}

std::vector<TraceEvent> RunReader::events_at(RunId run, std::span<const std::uint64_t> indices) {
  std::vector<TraceEvent> out;
  out.reserve(indices.size());
  std::optional<std::uint64_t> loaded;  // first event of the chunk in `chunk`
  EventChunk chunk;
  for (const std::uint64_t index : indices) {
    const std::uint64_t chunk_first = index - index % kEventsPerChunk;
    if (loaded != chunk_first) {
      chunk = load_chunk(run, chunk_first);
      loaded = chunk_first;
    }
    if (index - chunk_first >= chunk.events.size())
      throw DatabaseError(db_.path() + ": run " + std::to_string(run.value) + " has no event " +
                          std::to_string(index));
    out.push_back(chunk.events[static_cast<std::size_t>(index - chunk_first)]);
  }
  return out;
}

std::optional<EventOverview> RunReader::event_overview(RunId run) {
  const RunRecord record = RunCatalog(db_).run(run);
  const auto stored = record.summary.find("overview");
  if (stored == record.summary.end() || !stored->is_object())
    return std::nullopt;
  EventOverview out;
  out.first_time_us = stored->value("first_time_us", std::int64_t{0});
  out.last_time_us = stored->value("last_time_us", std::int64_t{0});
  auto query =
      db_.prepare("SELECT event_index FROM oom_events WHERE run_id = ? ORDER BY event_index");
  query.bind_int(1, run.value);
  while (query.step())
    out.oom_events.push_back(static_cast<std::uint64_t>(query.column_int(0)));
  return out;
}

std::vector<SeriesPoint> RunReader::series(RunId run, std::uint64_t first, std::uint64_t end) {
  end = std::min(end, event_count(run));
  std::vector<SeriesPoint> out;
  if (end <= first)
    return out;
  std::uint64_t index = first - first % kEventsPerChunk;
  for (const auto& chunk : load_chunks(run, first, end)) {
    for (const auto& point : chunk.series) {
      if (index >= first && index < end)
        out.push_back(point);
      ++index;
    }
  }
  return out;
}

std::vector<LabelId> RunReader::labels_of_events(RunId run, std::uint64_t first,
                                                 std::uint64_t end) {
  end = std::min(end, event_count(run));
  std::vector<LabelId> out;
  if (end <= first)
    return out;
  std::uint64_t index = first - first % kEventsPerChunk;
  for (const auto& chunk : load_chunks(run, first, end)) {
    for (std::size_t i = 0; i < chunk.events.size(); ++i, ++index) {
      if (index >= first && index < end)
        out.push_back(chunk.labels.empty() ? LabelId{} : chunk.labels[i]);
    }
  }
  return out;
}

std::vector<RunLabel> RunReader::labels(RunId run) {
  auto query =
      db_.prepare("SELECT id, category, op, layer FROM run_labels WHERE run_id = ? ORDER BY id");
  query.bind_int(1, run.value);
  std::vector<RunLabel> out;
  while (query.step()) {
    RunLabel label;
    label.id = LabelId{static_cast<std::uint32_t>(query.column_int(0))};
    label.label.category = category_from_string(query.column_text(1));
    label.label.op = query.column_text(2);
    label.label.layer = static_cast<int>(query.column_int(3));
    out.push_back(std::move(label));
  }
  return out;
}

std::vector<Frame> RunReader::frame_stack(RunId run, FrameStackId stack) {
  std::vector<Frame> frames;
  if (stack.value == 0)
    return frames;
  auto query = db_.prepare("SELECT frame_ids FROM frame_stacks WHERE run_id = ? AND id = ?");
  query.bind_int(1, run.value).bind_int(2, stack.value);
  if (!query.step())
    return frames;
  const auto blob = query.column_blob(0);
  const std::vector<std::uint8_t> ids(blob.begin(), blob.end());
  ByteReader in(ids, db_.path() + ": run " + std::to_string(run.value) + ", stack " +
                         std::to_string(stack.value));
  auto frame_query = db_.prepare(
      "SELECT f.line, file.text, name.text FROM frames f "
      "JOIN strings file ON file.run_id = f.run_id AND file.id = f.filename_id "
      "JOIN strings name ON name.run_id = f.run_id AND name.id = f.name_id "
      "WHERE f.run_id = ? AND f.id = ?");
  while (!in.at_end()) {
    frame_query.bind_int(1, run.value).bind_int(2, static_cast<std::int64_t>(in.varint()));
    if (!frame_query.step())
      in.fail("stack refers to a missing frame");
    frames.push_back(
        Frame{frame_query.column_text(1), frame_query.column_int(0), frame_query.column_text(2)});
    frame_query.reset();
  }
  return frames;
}

std::vector<std::vector<Frame>> RunReader::frame_stacks(RunId run) {
  std::unordered_map<std::int64_t, std::string> strings;
  auto string_query = db_.prepare("SELECT id, text FROM strings WHERE run_id = ?");
  string_query.bind_int(1, run.value);
  while (string_query.step())
    strings[string_query.column_int(0)] = string_query.column_text(1);
  const std::string what = db_.path() + ": run " + std::to_string(run.value);
  auto text = [&](std::int64_t id) {
    auto it = strings.find(id);
    if (it == strings.end())
      throw DatabaseError(what + ": a frame refers to missing string " + std::to_string(id));
    return it->second;
  };
  std::unordered_map<std::int64_t, Frame> frames;
  auto frame_query =
      db_.prepare("SELECT id, filename_id, line, name_id FROM frames WHERE run_id = ?");
  frame_query.bind_int(1, run.value);
  while (frame_query.step()) {
    frames[frame_query.column_int(0)] =
        Frame{text(frame_query.column_int(1)), frame_query.column_int(2),
              text(frame_query.column_int(3))};
  }
  std::vector<std::vector<Frame>> stacks;
  auto stack_query =
      db_.prepare("SELECT id, frame_ids FROM frame_stacks WHERE run_id = ? ORDER BY id");
  stack_query.bind_int(1, run.value);
  while (stack_query.step()) {
    const auto id = static_cast<std::size_t>(stack_query.column_int(0));
    if (id == 0 || id > (std::size_t{1} << 31))
      throw DatabaseError(what + ": bad stack id " + std::to_string(id));
    stacks.resize(std::max(stacks.size(), id));
    const auto blob = stack_query.column_blob(1);
    const std::vector<std::uint8_t> ids(blob.begin(), blob.end());
    ByteReader in(ids, what + ", stack " + std::to_string(id));
    while (!in.at_end()) {
      auto it = frames.find(static_cast<std::int64_t>(in.varint()));
      if (it == frames.end())
        in.fail("stack refers to a missing frame");
      stacks[id - 1].push_back(it->second);
    }
  }
  return stacks;
}

std::vector<OomReport> RunReader::oom_reports(RunId run) {
  auto query = db_.prepare(
      "SELECT id, event_index, report FROM oom_reports WHERE run_id = ? ORDER BY event_index, id");
  query.bind_int(1, run.value);
  std::vector<OomReport> out;
  while (query.step()) {
    OomReport report;
    report.id = query.column_int(0);
    report.event_index = static_cast<std::uint64_t>(query.column_int(1));
    report.report =
        parse_json(query.column_text(2), db_.path() + ": OOM report " + std::to_string(report.id));
    out.push_back(std::move(report));
  }
  return out;
}

std::vector<TimelineBucket> RunReader::timeline(RunId run, std::size_t buckets) {
  return timeline(run, 0, event_count(run), buckets);
}

std::vector<TimelineBucket> RunReader::timeline(RunId run, std::uint64_t first, std::uint64_t end,
                                                std::size_t buckets) {
  end = std::min(end, event_count(run));
  if (end <= first || buckets == 0)
    return {};
  const std::uint64_t width = (end - first) / buckets;
  if (width < kLevel0Events) {
    // Finer than level 0: from the events themselves.
    std::vector<TimelineBucket> singles;
    singles.reserve(static_cast<std::size_t>(end - first));
    std::uint64_t index = first - first % kEventsPerChunk;
    for (const auto& chunk : load_chunks(run, first, end)) {
      for (std::size_t i = 0; i < chunk.events.size(); ++i, ++index) {
        if (index >= first && index < end)
          singles.push_back(bucket_of(index, chunk.events[i], chunk.series[i]));
      }
    }
    return regroup_buckets(singles, first, end, buckets);
  }
  auto top = db_.prepare("SELECT max(level) FROM timeline_levels WHERE run_id = ?");
  top.bind_int(1, run.value);
  top.step();
  const int top_level = static_cast<int>(top.column_int(0));
  int level = 0;
  while (level < top_level && level_bucket_events(level + 1) <= width)
    ++level;
  const std::uint64_t size = level_bucket_events(level);
  auto query = db_.prepare(
      "SELECT first_bucket, data FROM timeline_levels WHERE run_id = ? AND level = ? AND "
      "first_bucket <= ? AND first_bucket + bucket_count > ? ORDER BY first_bucket");
  query.bind_int(1, run.value)
      .bind_int(2, level)
      .bind_int(3, static_cast<std::int64_t>((end - 1) / size))
      .bind_int(4, static_cast<std::int64_t>(first / size));
  std::vector<TimelineBucket> source;
  while (query.step()) {
    auto row = decode_buckets(query.column_blob(1),
                              db_.path() + ": run " + std::to_string(run.value) +
                                  ", timeline level " + std::to_string(level) + " from bucket " +
                                  std::to_string(query.column_int(0)));
    source.insert(source.end(), row.begin(), row.end());
  }
  return regroup_buckets(source, first, end, buckets);
}

std::uint64_t RunReader::event_at_time(RunId run, std::int64_t time_us) {
  auto query = db_.prepare(
      "SELECT first_event FROM event_chunks WHERE run_id = ? AND last_time_us >= ? "
      "ORDER BY first_event LIMIT 1");
  query.bind_int(1, run.value).bind_int(2, time_us);
  if (!query.step())
    return event_count(run);
  const auto chunk_first = static_cast<std::uint64_t>(query.column_int(0));
  const EventChunk chunk = load_chunk(run, chunk_first);
  for (std::size_t i = 0; i < chunk.events.size(); ++i) {
    if (chunk.events[i].time_us >= time_us)
      return chunk_first + i;
  }
  return chunk_first + chunk.events.size();
}

SegmentStateAt RunReader::segment_state(RunId run, std::uint64_t event_index) {
  event_index = std::min(event_index, event_count(run));
  auto query = db_.prepare(
      "SELECT event_index, data FROM segment_keyframes WHERE run_id = ? AND event_index <= ? "
      "ORDER BY event_index DESC LIMIT 1");
  query.bind_int(1, run.value).bind_int(2, static_cast<std::int64_t>(event_index));
  if (!query.step())
    throw DatabaseError(db_.path() + ": run " + std::to_string(run.value) +
                        " has no segment keyframe");
  const auto keyframe_index = static_cast<std::uint64_t>(query.column_int(0));
  SegmentStateAt at;
  at.event_index = event_index;
  at.state = SegmentMap::deserialize(query.column_blob(1),
                                     db_.path() + ": run " + std::to_string(run.value) +
                                         ", keyframe at event " + std::to_string(keyframe_index));
  if (event_index > keyframe_index) {
    const EventChunk chunk = load_chunk(run, keyframe_index);
    const auto count = static_cast<std::size_t>(event_index - keyframe_index);
    for (std::size_t i = 0; i < count && i < chunk.events.size(); ++i)
      at.state.apply(chunk.events[i]);
  }
  return at;
}
}  // namespace fragscope::storage
