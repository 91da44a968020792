// RunWriter: a run's events go in as they come (chunks compressed and segment keyframes made on
// two worker threads, timeline levels), committed at finish_run. Memory by category is in
// run_categories.cpp, the recorded environment in run_environment.cpp.
#include "storage/db/run_writer.h"

#include <algorithm>
#include <future>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "storage/db/packing.h"
#include "storage/db/run_store_internal.h"

namespace fragscope::storage {

using run_store_detail::kCategoryNames;
using run_store_detail::now_iso8601;

RunWriter::RunWriter(Database& db) : db_(db) {}

RunWriter::~RunWriter() = default;

template <typename Work>
void RunWriter::abort_on_failure(Work&& work) {
  try {
    work();
  } catch (...) {
    // A failed write (disk full, I/O error) leaves the transaction unusable: roll the run back
    // so the writer stays usable and the database holds exactly what it held before begin_run.
    ingest_.reset();
    throw;
  }
}

RunId RunWriter::begin_run(RunRecord record, const SegmentMap& initial, SeriesPoint start) {
  if (ingest_)
    throw DatabaseError(db_.path() + ": run " + std::to_string(ingest_->run.value) +
                        " is still being written; finish or cancel it first");
  if (record.experiment) {
    auto check = db_.prepare("SELECT 1 FROM experiments WHERE id = ?");
    check.bind_int(1, record.experiment->value);
    if (!check.step())
      throw DatabaseError(db_.path() + ": no experiment with id " +
                          std::to_string(record.experiment->value));
  }
  if (record.twin_run)
    run_store_detail::require_run(db_, *record.twin_run);

  auto ingest = std::make_unique<Ingest>(db_, RunId{});
  auto insert = db_.prepare(
      "INSERT INTO runs(experiment_id, name, source, alloc_conf, capacity, device_name, status, "
      "created_at, wall_seconds, torch_version, cuda_version, driver_version, gpu_name, "
      "gpu_memory, fragscope_version, git_revision, host, twin_run, summary, event_count) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)");
  if (record.experiment)
    insert.bind_int(1, record.experiment->value);
  else
    insert.bind_null(1);
  const Environment& env = record.environment;
  insert.bind_text(2, record.name)
      .bind_text(3, to_string(record.source))
      .bind_text(4, record.alloc_conf)
      .bind_int(5, static_cast<std::int64_t>(record.capacity))
      .bind_text(6, record.device_name)
      .bind_text(7, to_string(record.status))
      .bind_text(8, now_iso8601())
      .bind_double(9, record.wall_seconds)
      .bind_text(10, env.torch_version)
      .bind_text(11, env.cuda_version)
      .bind_text(12, env.driver_version)
      .bind_text(13, env.gpu_name)
      .bind_int(14, static_cast<std::int64_t>(env.gpu_memory))
      .bind_text(15, env.fragscope_version)
      .bind_text(16, env.git_revision)
      .bind_text(17, env.host);
  if (record.twin_run)
    insert.bind_int(18, record.twin_run->value);
  else
    insert.bind_null(18);
  insert.bind_text(19, record.summary.is_null() ? "{}" : record.summary.dump());
  insert.run();
  ingest->run = RunId{db_.last_insert_rowid()};
  ingest->segments = initial;
  for (const auto& [addr, block] : initial.blocks())
    ingest->categories.add_initial(addr, static_cast<std::int64_t>(block.size));
  ingest->category_buffer.clear(ingest->categories.bytes());
  ingest->chunk_start = start;
  ingest->current = start;
  ingest->peak = start;
  ingest->write_keyframe(0, ingest->segments.serialize());
  ingest_ = std::move(ingest);
  return ingest_->run;
}

RunWriter::Ingest& RunWriter::ingest_for(RunId run) {
  if (!ingest_ || ingest_->run != run)
    throw DatabaseError(db_.path() + ": run " + std::to_string(run.value) +
                        " is not being written by this store (begin_run first)");
  return *ingest_;
}

void RunWriter::append_events(RunId run, std::span<const TraceEvent> events, EventColumns columns) {
  Ingest& ingest = ingest_for(run);
  abort_on_failure([&] { append_to(ingest, events, columns); });
}

void RunWriter::append_to(Ingest& ingest, std::span<const TraceEvent> events,
                          EventColumns columns) {
  if (!columns.series.empty() && columns.series.size() != events.size())
    throw DatabaseError("append_events: " + std::to_string(columns.series.size()) +
                        " series points for " + std::to_string(events.size()) + " events");
  if (!columns.labels.empty() && columns.labels.size() != events.size())
    throw DatabaseError("append_events: " + std::to_string(columns.labels.size()) + " labels for " +
                        std::to_string(events.size()) + " events");
  // A part's worth of events at a time: copied into the part whole, then walked once for what
  // ingest derives on this thread.
  for (std::size_t done = 0; done < events.size();) {
    EventChunk& buffer = ingest.buffer;
    const std::size_t count =
        std::min(events.size() - done, Ingest::kEventsPerPart - buffer.events.size());
    const auto part = events.subspan(done, count);
    const std::uint64_t first_index = ingest.event_count();
    // A part carries a label column once any of its events is labelled; the events before
    // that one are unlabelled (and so are a labelled chunk's other parts: ChunkEncoder::append).
    // (Testing the column instead of the batch lost the label of a chunk's first event.)
    const auto labels =
        columns.labels.empty() ? columns.labels : columns.labels.subspan(done, count);
    if (!labels.empty()) {
      buffer.labels.resize(buffer.events.size());
      buffer.labels.insert(buffer.labels.end(), labels.begin(), labels.end());
    } else if (!buffer.labels.empty()) {
      buffer.labels.resize(buffer.labels.size() + count);
    }
    buffer.events.insert(buffer.events.end(), part.begin(), part.end());
    const std::size_t series_first = buffer.series.size();
    if (columns.series.empty()) {
      SeriesPoint current = ingest.current;
      for (const TraceEvent& event : part) {
        current = plus(current, trace_delta(event));
        buffer.series.push_back(current);
      }
    } else {
      const auto series = columns.series.subspan(done, count);
      buffer.series.insert(buffer.series.end(), series.begin(), series.end());
      ingest.buffer_series_source = ChunkEncoder::SeriesSource::producer;
    }
    const std::span<const SeriesPoint> after(buffer.series.data() + series_first, count);
    SeriesPoint peak = ingest.peak;
    for (std::size_t i = 0; i < count; ++i) {
      const TraceEvent& event = part[i];
      const std::uint64_t index = first_index + i;
      if (event.action == TraceAction::oom)
        ingest.oom_events.push_back(index);
      if (event.time_us != 0) {
        if (ingest.first_time_us == 0)
          ingest.first_time_us = event.time_us;
        ingest.last_time_us = event.time_us;
      }
      peak = series_max(peak, after[i]);
      ingest.timeline.add(index, event, after[i]);
      if (!ingest.category_of_label.empty())
        track_categories(ingest, index, event, labels.empty() ? LabelId{} : labels[i]);
    }
    ingest.peak = peak;
    if (count != 0)
      ingest.current = after.back();
    done += count;
    if (buffer.events.size() == Ingest::kEventsPerPart)
      flush_part(ingest, ingest.chunk_events() == kEventsPerChunk);
  }
  for (auto& row : ingest.timeline.take_full_rows())
    ingest.timeline_rows.push_back(std::move(row));
  for (auto& row : ingest.category_levels.take_full_rows())
    ingest.category_rows.push_back(std::move(row));
}

void RunWriter::flush_part(Ingest& ingest, bool ends_chunk) {
  EventChunk& buffer = ingest.buffer;
  if (ingest.chunk_events() == 0)
    return;
  ingest.write_pending_chunks(Ingest::kMaxPending - 1);
  // Packing and compressing a chunk, its categories and the segment keyframe after it are most of
  // the ingest cost: they run on other cores while this thread fills the next part. Rows are
  // still written in order, on this connection's thread.
  const bool starts_chunk = ingest.flushed == ingest.chunk_first;
  if (starts_chunk)
    ingest.chunk_first_time_us = buffer.events.front().time_us;
  if (!buffer.events.empty())
    ingest.chunk_last_time_us = buffer.events.back().time_us;
  Ingest::PendingPart pending;
  pending.ends_chunk = ends_chunk;
  pending.first_event = ingest.chunk_first;
  pending.count = ingest.chunk_events();
  pending.first_time_us = ingest.chunk_first_time_us;
  pending.last_time_us = ingest.chunk_last_time_us;
  if (ingest.spare_work.empty()) {
    pending.work = std::make_unique<Ingest::PartWork>();
  } else {
    pending.work = std::move(ingest.spare_work.back());
    ingest.spare_work.pop_back();
  }
  // The part goes to the work; the buffer takes the work's emptied vectors, capacity and all.
  std::swap(pending.work->part, buffer);
  pending.work->series_source = ingest.buffer_series_source;
  ingest.buffer_series_source = ChunkEncoder::SeriesSource::derived;
  if (ends_chunk)
    std::swap(pending.work->categories, ingest.category_buffer);
  std::swap(pending.work->timeline_rows, ingest.timeline_rows);
  std::swap(pending.work->category_rows, ingest.category_rows);
  // Queued before its tasks start: were a submit to throw, the part they use stays alive until
  // the Ingest goes, and its workers go first.
  ingest.flushed += pending.work->part.events.size();
  ingest.pending.push_back(std::move(pending));
  Ingest::PendingPart& queued = ingest.pending.back();
  Ingest::PartWork* const work = queued.work.get();
  queued.blob = ingest.worker.submit([work, encoder = &ingest.encoder, start = ingest.chunk_start,
                                      starts_chunk, ends_chunk]() -> std::span<const std::uint8_t> {
    if (starts_chunk)
      encoder->begin(start);
    const EventChunk& part = work->part;
    encoder->append(part.events, part.series, part.labels, work->series_source);
    work->encode_level_rows();
    if (!ends_chunk)
      return {};
    if (work->categories.size() != 0)
      work->category_blob = work->categories.encode();
    return encoder->finish();
  });
  // The keyframes' segment map beside it, on a core of its own: it was half the one worker's
  // time, and that worker the ingest's slowest stage. The two read the part, and write apart.
  queued.keyframe = ingest.keyframe_worker.submit([work, segments = &ingest.segments, ends_chunk] {
    segments->apply_all(work->part.events);
    if (ends_chunk)
      work->keyframe = segments->serialize();
  });
  if (ends_chunk) {
    ingest.chunk_first = ingest.flushed;
    ingest.chunk_start = ingest.current;
    ingest.category_buffer.clear(ingest.categories.bytes());
  }
}

void RunWriter::write_timeline_rows(RunId run, const std::vector<TimelineBuilder::Row>& rows) {
  run_store_detail::insert_level_rows(db_, "timeline_levels", run, rows,
                                      [](const auto& buckets) { return encode_buckets(buckets); });
}

void RunWriter::set_frame_stacks(RunId run, std::span<const std::vector<Frame>> stacks) {
  ingest_for(run);
  abort_on_failure([&] { write_frame_stacks(run, stacks); });
}

void RunWriter::write_frame_stacks(RunId run, std::span<const std::vector<Frame>> stacks) {
  for (const char* table : {"strings", "frames", "frame_stacks"}) {
    auto erase = db_.prepare(std::string("DELETE FROM ") + table + " WHERE run_id = ?");
    erase.bind_int(1, run.value);
    erase.run();
  }
  auto insert_string = db_.prepare("INSERT INTO strings(run_id, id, text) VALUES (?, ?, ?)");
  auto insert_frame = db_.prepare(
      "INSERT INTO frames(run_id, id, filename_id, line, name_id) VALUES (?, ?, ?, ?, ?)");
  auto insert_stack =
      db_.prepare("INSERT INTO frame_stacks(run_id, id, frame_ids) VALUES (?, ?, ?)");
  std::map<std::string, std::int64_t, std::less<>> strings;
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, std::int64_t> frames;
  auto intern_string = [&](const std::string& text) {
    auto [it, inserted] = strings.try_emplace(text, static_cast<std::int64_t>(strings.size()) + 1);
    if (inserted) {
      insert_string.bind_int(1, run.value).bind_int(2, it->second).bind_text(3, text);
      insert_string.run();
      insert_string.reset();
    }
    return it->second;
  };
  for (std::size_t s = 0; s < stacks.size(); ++s) {
    std::vector<std::uint8_t> ids;
    for (const auto& frame : stacks[s]) {
      const auto key =
          std::make_tuple(intern_string(frame.filename), frame.line, intern_string(frame.name));
      auto [it, inserted] = frames.try_emplace(key, static_cast<std::int64_t>(frames.size()) + 1);
      if (inserted) {
        insert_frame.bind_int(1, run.value)
            .bind_int(2, it->second)
            .bind_int(3, std::get<0>(key))
            .bind_int(4, std::get<1>(key))
            .bind_int(5, std::get<2>(key));
        insert_frame.run();
        insert_frame.reset();
      }
      put_varint(ids, static_cast<std::uint64_t>(it->second));
    }
    insert_stack.bind_int(1, run.value)
        .bind_int(2, static_cast<std::int64_t>(s) + 1)
        .bind_blob(3, ids);
    insert_stack.run();
    insert_stack.reset();
  }
}

void RunWriter::set_labels(RunId run, std::span<const RequestLabel> labels) {
  Ingest& ingest = ingest_for(run);
  // Memory by category is built as events come, from the table known then: a later table could
  // not stack the events before it, and the run's category plot would replay it on every zoom.
  if (ingest.event_count() != 0)
    throw DatabaseError(db_.path() + ": run " + std::to_string(run.value) +
                        ": set_labels after events; set the label table first");
  abort_on_failure([&] { write_labels(run, labels); });
  ingest.category_of_label.clear();
  for (const auto& label : labels)
    ingest.category_of_label.push_back(label.category);
}

void RunWriter::write_labels(RunId run, std::span<const RequestLabel> labels) {
  auto erase = db_.prepare("DELETE FROM run_labels WHERE run_id = ?");
  erase.bind_int(1, run.value);
  erase.run();
  auto insert =
      db_.prepare("INSERT INTO run_labels(run_id, id, category, op, layer) VALUES (?, ?, ?, ?, ?)");
  for (std::size_t i = 0; i < labels.size(); ++i) {
    insert.bind_int(1, run.value)
        .bind_int(2, static_cast<std::int64_t>(i))
        .bind_text(3, kCategoryNames[static_cast<std::size_t>(labels[i].category)])
        .bind_text(4, labels[i].op)
        .bind_int(5, labels[i].layer);
    insert.run();
    insert.reset();
  }
}

void RunWriter::add_oom_report(RunId run, std::uint64_t event_index, const nlohmann::json& report) {
  const bool in_ingest = ingest_ && ingest_->run == run;
  std::optional<Transaction> transaction;
  if (!in_ingest) {
    run_store_detail::require_run(db_, run);
    transaction.emplace(db_);
  }
  auto insert =
      db_.prepare("INSERT INTO oom_reports(run_id, event_index, report) VALUES (?, ?, ?)");
  insert.bind_int(1, run.value)
      .bind_int(2, static_cast<std::int64_t>(event_index))
      .bind_text(3, report.dump());
  insert.run();
  if (transaction)
    transaction->commit();
}

RunRecord RunWriter::finish_run(RunId run, RunStatus status, const nlohmann::json& summary,
                                double wall_seconds, const CancelToken& cancel) {
  Ingest& ingest = ingest_for(run);
  abort_on_failure([&] { commit_ingest(ingest, status, summary, wall_seconds, cancel); });
  ingest_.reset();
  return RunCatalog(db_).run(run);
}

void RunWriter::commit_ingest(Ingest& ingest, RunStatus status, const nlohmann::json& summary,
                              double wall_seconds, const CancelToken& cancel) {
  const RunId run = ingest.run;
  flush_part(ingest, true);
  ingest.write_pending_chunks(0);
  // Rows no part took (none was left to flush), then the partial rows of the run's end.
  write_timeline_rows(run, ingest.timeline_rows);
  write_category_rows(run, ingest.category_rows);
  write_timeline_rows(run, ingest.timeline.finish());
  write_category_rows(run, ingest.category_levels.finish());

  nlohmann::json merged = summary.is_object() ? summary : nlohmann::json::object();
  merged["events"] = ingest.event_count();
  merged["peaks"] = {{"allocated", ingest.peak.allocated},
                     {"reserved", ingest.peak.reserved},
                     {"active", ingest.peak.active},
                     {"requested", ingest.peak.requested}};
  merged["final"] = {{"allocated", ingest.current.allocated},
                     {"reserved", ingest.current.reserved},
                     {"active", ingest.current.active},
                     {"requested", ingest.current.requested}};
  merged["overview"] = {{"first_time_us", ingest.first_time_us},
                        {"last_time_us", ingest.last_time_us},
                        {"oom_events", ingest.oom_events.size()}};
  auto insert_oom = db_.prepare("INSERT INTO oom_events(run_id, event_index) VALUES (?, ?)");
  for (const std::uint64_t index : ingest.oom_events) {
    insert_oom.bind_int(1, run.value).bind_int(2, static_cast<std::int64_t>(index));
    insert_oom.run();
    insert_oom.reset();
  }
  auto update = db_.prepare(
      "UPDATE runs SET status = ?, wall_seconds = ?, summary = ?, event_count = ? WHERE id = ?");
  update.bind_text(1, to_string(status))
      .bind_double(2, wall_seconds)
      .bind_text(3, merged.dump())
      .bind_int(4, static_cast<std::int64_t>(ingest.event_count()))
      .bind_int(5, run.value);
  update.run();
  cancel.throw_if_cancelled();
  ingest.transaction.commit();
}

void RunWriter::cancel_run(RunId run) {
  ingest_for(run);
  ingest_.reset();  // the Transaction's destructor rolls everything back
}
}  // namespace fragscope::storage
