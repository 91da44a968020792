#include "storage/db/run_store.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <ctime>
#include <deque>
#include <filesystem>
#include <future>
#include <map>
#include <tuple>
#include <unordered_map>

#include "fragscope/version.h"
#include "storage/db/packing.h"
#include "storage/db/schema.h"

namespace fragscope::storage {
namespace {

constexpr std::array<std::string_view, 4> kSourceNames = {"simulated", "imported", "gpu", "torch"};
constexpr std::array<std::string_view, 4> kStatusNames = {"ok", "oom", "cancelled", "failed"};
constexpr std::array<std::string_view, 7> kCategoryNames = {
    "unknown", "parameter", "gradient", "optimizer_state", "activation", "temporary", "input"};

std::string now_iso8601() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::array<char, 32> text{};
  std::strftime(text.data(), text.size(), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text.data();
}

Category category_from_string(std::string_view text) {
  for (std::size_t i = 0; i < kCategoryNames.size(); ++i) {
    if (kCategoryNames[i] == text)
      return static_cast<Category>(i);
  }
  return Category::unknown;
}

nlohmann::json parse_json(const std::string& text, const std::string& what) {
  auto value = nlohmann::json::parse(text, nullptr, false);
  if (value.is_discarded())
    throw DatabaseError(what + ": stored JSON is corrupt");
  return value;
}

SeriesPoint plus(const SeriesPoint& a, const SeriesPoint& b) {
  return {a.allocated + b.allocated, a.reserved + b.reserved, a.active + b.active,
          a.requested + b.requested};
}

SeriesPoint series_max(const SeriesPoint& a, const SeriesPoint& b) {
  return {std::max(a.allocated, b.allocated), std::max(a.reserved, b.reserved),
          std::max(a.active, b.active), std::max(a.requested, b.requested)};
}

constexpr std::string_view kRunColumns =
    "id, experiment_id, name, source, alloc_config, capacity, device_name, status, created_at, "
    "wall_seconds, torch_version, cuda_version, driver_version, gpu_name, gpu_memory, "
    "fragscope_version, git_revision, host, twin_run, summary, event_count";

RunRecord read_run(const Statement& row, const std::string& db_path) {
  RunRecord run;
  run.id = RunId{row.column_int(0)};
  if (!row.column_is_null(1))
    run.experiment = ExperimentId{row.column_int(1)};
  run.name = row.column_text(2);
  const std::string what = db_path + ": run " + std::to_string(run.id.value);
  const auto source = run_source_from_string(row.column_text(3));
  const auto status = run_status_from_string(row.column_text(7));
  if (!source || !status)
    throw DatabaseError(what + ": unknown source or status");
  run.source = *source;
  run.alloc_config = row.column_text(4);
  run.capacity = static_cast<Bytes>(row.column_int(5));
  run.device_name = row.column_text(6);
  run.status = *status;
  run.created_at = row.column_text(8);
  run.wall_seconds = row.column_double(9);
  Environment& env = run.environment;
  env.torch_version = row.column_text(10);
  env.cuda_version = row.column_text(11);
  env.driver_version = row.column_text(12);
  env.gpu_name = row.column_text(13);
  env.gpu_memory = static_cast<Bytes>(row.column_int(14));
  env.fragscope_version = row.column_text(15);
  env.git_revision = row.column_text(16);
  env.host = row.column_text(17);
  if (!row.column_is_null(18))
    run.twin_run = RunId{row.column_int(18)};
  run.summary = parse_json(row.column_text(19), what);
  run.event_count = static_cast<std::uint64_t>(row.column_int(20));
  return run;
}

}  // namespace

std::string_view to_string(RunSource source) {
  return kSourceNames[static_cast<std::size_t>(source)];
}
std::string_view to_string(RunStatus status) {
  return kStatusNames[static_cast<std::size_t>(status)];
}
std::optional<RunSource> run_source_from_string(std::string_view text) {
  for (std::size_t i = 0; i < kSourceNames.size(); ++i) {
    if (kSourceNames[i] == text)
      return static_cast<RunSource>(i);
  }
  return std::nullopt;
}
std::optional<RunStatus> run_status_from_string(std::string_view text) {
  for (std::size_t i = 0; i < kStatusNames.size(); ++i) {
    if (kStatusNames[i] == text)
      return static_cast<RunStatus>(i);
  }
  return std::nullopt;
}

Environment Environment::current() {
  Environment env;
  env.fragscope_version = kVersion;
  env.git_revision = kGitRevision;
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) == 0)
    env.host = host.data();
  return env;
}

// The state of the run being written: its transaction, the chunk being filled, the segment map
// and series after the last event, and the timeline levels being built.
struct RunStore::Ingest {
  RunId run{};
  Transaction transaction;
  std::uint64_t flushed = 0;  // events already written as chunks
  EventChunk buffer;          // the chunk being filled; buffer.start = series before it
  SeriesPoint current;        // the series after the last event
  SeriesPoint peak;
  SegmentMap segments;  // after the last event
  TimelineBuilder timeline;
  Statement insert_chunk;
  Statement insert_keyframe;

  Ingest(Database& db, RunId id)
      : run(id),
        transaction(db),
        insert_chunk(db,
                     "INSERT INTO event_chunks(run_id, first_event, event_count, first_time_us, "
                     "last_time_us, data) VALUES (?, ?, ?, ?, ?, ?)"),
        insert_keyframe(db,
                        "INSERT OR REPLACE INTO segment_keyframes(run_id, event_index, data) "
                        "VALUES (?, ?, ?)") {}

  std::uint64_t event_count() const { return flushed + buffer.events.size(); }

  // Chunks being compressed in the background, oldest first.
  struct PendingChunk {
    std::uint64_t first_event = 0;
    std::uint64_t count = 0;
    std::int64_t first_time_us = 0;
    std::int64_t last_time_us = 0;
    std::future<std::vector<std::uint8_t>> blob;
  };
  std::deque<PendingChunk> pending;
  // Two chunks in flight keep both cores of a small machine busy without holding much memory.
  static constexpr std::size_t kMaxPending = 2;

  // Writes pending chunks, oldest first, until at most `keep` remain.
  void write_pending_chunks(std::size_t keep) {
    while (pending.size() > keep) {
      PendingChunk& oldest = pending.front();
      const auto blob = oldest.blob.get();
      insert_chunk.bind_int(1, run.value)
          .bind_int(2, static_cast<std::int64_t>(oldest.first_event))
          .bind_int(3, static_cast<std::int64_t>(oldest.count))
          .bind_int(4, oldest.first_time_us)
          .bind_int(5, oldest.last_time_us)
          .bind_blob(6, blob);
      pending.pop_front();
      insert_chunk.run();
      insert_chunk.reset();
    }
  }

  void write_keyframe() {
    const auto blob = segments.serialize();
    insert_keyframe.bind_int(1, run.value)
        .bind_int(2, static_cast<std::int64_t>(event_count()))
        .bind_blob(3, blob);
    insert_keyframe.run();
    insert_keyframe.reset();
  }
};

std::unique_ptr<RunStore> open_run_store(const std::string& path, OpenMode mode, bool must_exist) {
  if (must_exist && path != ":memory:" && !std::filesystem::exists(path))
    throw DatabaseError(path + ": no such database");
  return std::make_unique<RunStore>(path, mode);
}

RunStore::RunStore(const std::string& path, OpenMode mode) : db_(open_store_database(path, mode)) {}

RunStore::~RunStore() = default;

// --- Experiments ---

ExperimentId RunStore::create_experiment(const std::string& name,
                                         const nlohmann::json& definition) {
  auto insert =
      db_->prepare("INSERT INTO experiments(name, definition, created_at) VALUES (?, ?, ?)");
  insert.bind_text(1, name).bind_text(2, definition.dump()).bind_text(3, now_iso8601());
  insert.run();
  return ExperimentId{db_->last_insert_rowid()};
}

std::vector<ExperimentRecord> RunStore::list_experiments() {
  auto query = db_->prepare("SELECT id, name, definition, created_at FROM experiments ORDER BY id");
  std::vector<ExperimentRecord> all;
  while (query.step()) {
    ExperimentRecord record;
    record.id = ExperimentId{query.column_int(0)};
    record.name = query.column_text(1);
    record.definition = parse_json(query.column_text(2),
                                   db_->path() + ": experiment " + std::to_string(record.id.value));
    record.created_at = query.column_text(3);
    all.push_back(std::move(record));
  }
  return all;
}

ExperimentRecord RunStore::experiment(ExperimentId id) {
  for (auto& record : list_experiments()) {
    if (record.id == id)
      return record;
  }
  throw DatabaseError(db_->path() + ": no experiment with id " + std::to_string(id.value));
}

void RunStore::delete_experiment(ExperimentId id) {
  auto erase = db_->prepare("DELETE FROM experiments WHERE id = ?");
  erase.bind_int(1, id.value);
  erase.run();
  if (db_->changes() == 0)
    throw DatabaseError(db_->path() + ": no experiment with id " + std::to_string(id.value));
}

// --- Ingest ---

template <typename Work>
void RunStore::abort_on_failure(Work&& work) {
  try {
    work();
  } catch (...) {
    // A failed write (disk full, I/O error) leaves the transaction unusable: roll the run back
    // so the store stays usable and the database holds exactly what it held before begin_run.
    ingest_.reset();
    throw;
  }
}

RunId RunStore::begin_run(RunRecord record, const SegmentMap& initial, SeriesPoint start) {
  if (ingest_)
    throw DatabaseError(db_->path() + ": run " + std::to_string(ingest_->run.value) +
                        " is still being written; finish or cancel it first");
  if (record.experiment) {
    auto check = db_->prepare("SELECT 1 FROM experiments WHERE id = ?");
    check.bind_int(1, record.experiment->value);
    if (!check.step())
      throw DatabaseError(db_->path() + ": no experiment with id " +
                          std::to_string(record.experiment->value));
  }
  if (record.twin_run)
    require_run(*record.twin_run);

  auto ingest = std::make_unique<Ingest>(*db_, RunId{});
  auto insert = db_->prepare(
      "INSERT INTO runs(experiment_id, name, source, alloc_config, capacity, device_name, status, "
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
      .bind_text(4, record.alloc_config)
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
  ingest->run = RunId{db_->last_insert_rowid()};
  ingest->segments = initial;
  ingest->buffer.start = start;
  ingest->current = start;
  ingest->peak = start;
  ingest->write_keyframe();
  ingest_ = std::move(ingest);
  return ingest_->run;
}

RunStore::Ingest& RunStore::ingest_for(RunId run) {
  if (!ingest_ || ingest_->run != run)
    throw DatabaseError(db_->path() + ": run " + std::to_string(run.value) +
                        " is not being written by this store (begin_run first)");
  return *ingest_;
}

void RunStore::append_events(RunId run, std::span<const TraceEvent> events, EventColumns columns) {
  Ingest& ingest = ingest_for(run);
  abort_on_failure([&] { append_to(ingest, events, columns); });
}

void RunStore::append_to(Ingest& ingest, std::span<const TraceEvent> events, EventColumns columns) {
  const RunId run = ingest.run;
  if (!columns.series.empty() && columns.series.size() != events.size())
    throw DatabaseError("append_events: " + std::to_string(columns.series.size()) +
                        " series points for " + std::to_string(events.size()) + " events");
  if (!columns.labels.empty() && columns.labels.size() != events.size())
    throw DatabaseError("append_events: " + std::to_string(columns.labels.size()) + " labels for " +
                        std::to_string(events.size()) + " events");
  for (std::size_t i = 0; i < events.size(); ++i) {
    EventChunk& buffer = ingest.buffer;
    if (!columns.labels.empty() && buffer.labels.size() < buffer.events.size())
      buffer.labels.resize(buffer.events.size());  // earlier events of this chunk: unlabelled
    const TraceEvent& event = events[i];
    const SeriesPoint after =
        columns.series.empty() ? plus(ingest.current, trace_delta(event)) : columns.series[i];
    const std::uint64_t index = ingest.event_count();
    buffer.events.push_back(event);
    buffer.series.push_back(after);
    if (!buffer.labels.empty())
      buffer.labels.push_back(columns.labels.empty() ? LabelId{} : columns.labels[i]);
    ingest.current = after;
    ingest.peak = series_max(ingest.peak, after);
    ingest.timeline.add(index, event, after);
    if (buffer.events.size() == kEventsPerChunk)
      flush_chunk(ingest);
  }
  write_timeline_rows(run, ingest.timeline.take_full_rows());
}

void RunStore::flush_chunk(Ingest& ingest) {
  EventChunk& buffer = ingest.buffer;
  if (buffer.events.empty())
    return;
  ingest.write_pending_chunks(Ingest::kMaxPending - 1);
  // The keyframe of the next chunk is the state after this one.
  for (const auto& event : buffer.events)
    ingest.segments.apply(event);
  // Compressing a chunk is most of the ingest cost: it runs on another core while this thread
  // fills the next chunk. Rows are still written in order, on this connection's thread.
  Ingest::PendingChunk pending;
  pending.first_event = ingest.flushed;
  pending.count = buffer.events.size();
  pending.first_time_us = buffer.events.front().time_us;
  pending.last_time_us = buffer.events.back().time_us;
  pending.blob =
      std::async(std::launch::async, [chunk = std::move(buffer)] { return encode_chunk(chunk); });
  ingest.flushed += pending.count;
  ingest.pending.push_back(std::move(pending));
  buffer = EventChunk{};
  buffer.start = ingest.current;
  ingest.write_keyframe();
}

void RunStore::write_timeline_rows(RunId run, const std::vector<TimelineBuilder::Row>& rows) {
  if (rows.empty())
    return;
  auto insert = db_->prepare(
      "INSERT INTO timeline_levels(run_id, level, first_bucket, bucket_count, data) "
      "VALUES (?, ?, ?, ?, ?)");
  for (const auto& row : rows) {
    insert.bind_int(1, run.value)
        .bind_int(2, row.level)
        .bind_int(3, static_cast<std::int64_t>(row.first_bucket))
        .bind_int(4, static_cast<std::int64_t>(row.buckets.size()))
        .bind_blob(5, encode_buckets(row.buckets));
    insert.run();
    insert.reset();
  }
}

void RunStore::set_frame_stacks(RunId run, std::span<const std::vector<StackFrame>> stacks) {
  ingest_for(run);
  abort_on_failure([&] { write_frame_stacks(run, stacks); });
}

void RunStore::write_frame_stacks(RunId run, std::span<const std::vector<StackFrame>> stacks) {
  for (const char* table : {"strings", "frames", "frame_stacks"}) {
    auto erase = db_->prepare(std::string("DELETE FROM ") + table + " WHERE run_id = ?");
    erase.bind_int(1, run.value);
    erase.run();
  }
  auto insert_string = db_->prepare("INSERT INTO strings(run_id, id, text) VALUES (?, ?, ?)");
  auto insert_frame = db_->prepare(
      "INSERT INTO frames(run_id, id, filename_id, line, name_id) VALUES (?, ?, ?, ?, ?)");
  auto insert_stack =
      db_->prepare("INSERT INTO frame_stacks(run_id, id, frame_ids) VALUES (?, ?, ?)");
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

void RunStore::set_labels(RunId run, std::span<const RequestLabel> labels) {
  ingest_for(run);
  abort_on_failure([&] { write_labels(run, labels); });
}

void RunStore::write_labels(RunId run, std::span<const RequestLabel> labels) {
  auto erase = db_->prepare("DELETE FROM run_labels WHERE run_id = ?");
  erase.bind_int(1, run.value);
  erase.run();
  auto insert = db_->prepare(
      "INSERT INTO run_labels(run_id, id, category, op, layer) VALUES (?, ?, ?, ?, ?)");
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

void RunStore::add_oom_report(RunId run, std::uint64_t event_index, const nlohmann::json& report) {
  const bool in_ingest = ingest_ && ingest_->run == run;
  std::optional<Transaction> transaction;
  if (!in_ingest) {
    require_run(run);
    transaction.emplace(*db_);
  }
  auto insert =
      db_->prepare("INSERT INTO oom_reports(run_id, event_index, report) VALUES (?, ?, ?)");
  insert.bind_int(1, run.value)
      .bind_int(2, static_cast<std::int64_t>(event_index))
      .bind_text(3, report.dump());
  insert.run();
  if (transaction)
    transaction->commit();
}

RunRecord RunStore::finish_run(RunId run, RunStatus status, const nlohmann::json& summary,
                               double wall_seconds, const CancelToken& cancel) {
  Ingest& ingest = ingest_for(run);
  abort_on_failure([&] { commit_ingest(ingest, status, summary, wall_seconds, cancel); });
  ingest_.reset();
  return this->run(run);
}

void RunStore::commit_ingest(Ingest& ingest, RunStatus status, const nlohmann::json& summary,
                             double wall_seconds, const CancelToken& cancel) {
  const RunId run = ingest.run;
  flush_chunk(ingest);
  ingest.write_pending_chunks(0);
  write_timeline_rows(run, ingest.timeline.finish());

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
  auto update = db_->prepare(
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

void RunStore::cancel_run(RunId run) {
  ingest_for(run);
  ingest_.reset();  // the Transaction's destructor rolls everything back
}

// --- Runs ---

std::vector<RunRecord> RunStore::list_runs() {
  auto query = db_->prepare("SELECT " + std::string(kRunColumns) + " FROM runs ORDER BY id");
  std::vector<RunRecord> runs;
  while (query.step())
    runs.push_back(read_run(query, db_->path()));
  return runs;
}

std::vector<RunRecord> RunStore::runs_of(ExperimentId experiment) {
  auto query = db_->prepare("SELECT " + std::string(kRunColumns) +
                            " FROM runs WHERE experiment_id = ? ORDER BY id");
  query.bind_int(1, experiment.value);
  std::vector<RunRecord> runs;
  while (query.step())
    runs.push_back(read_run(query, db_->path()));
  return runs;
}

std::int64_t RunStore::run_count() {
  return db_->query_int("SELECT count(*) FROM runs");
}

RunRecord RunStore::run(RunId id) {
  auto query = db_->prepare("SELECT " + std::string(kRunColumns) + " FROM runs WHERE id = ?");
  query.bind_int(1, id.value);
  if (!query.step())
    throw DatabaseError(db_->path() + ": no run with id " + std::to_string(id.value));
  return read_run(query, db_->path());
}

bool RunStore::has_run(RunId id) {
  auto query = db_->prepare("SELECT 1 FROM runs WHERE id = ?");
  query.bind_int(1, id.value);
  return query.step();
}

void RunStore::require_run(RunId id) {
  if (!has_run(id))
    throw DatabaseError(db_->path() + ": no run with id " + std::to_string(id.value));
}

void RunStore::rename_run(RunId id, const std::string& name) {
  auto update = db_->prepare("UPDATE runs SET name = ? WHERE id = ?");
  update.bind_text(1, name).bind_int(2, id.value);
  update.run();
  if (db_->changes() == 0)
    throw DatabaseError(db_->path() + ": no run with id " + std::to_string(id.value));
}

void RunStore::set_twin(RunId real_run, std::optional<RunId> simulated_twin) {
  require_run(real_run);
  if (simulated_twin)
    require_run(*simulated_twin);
  auto update = db_->prepare("UPDATE runs SET twin_run = ? WHERE id = ?");
  if (simulated_twin)
    update.bind_int(1, simulated_twin->value);
  else
    update.bind_null(1);
  update.bind_int(2, real_run.value);
  update.run();
}

void RunStore::update_summary(RunId id, const nlohmann::json& summary) {
  auto update = db_->prepare("UPDATE runs SET summary = ? WHERE id = ?");
  update.bind_text(1, summary.dump()).bind_int(2, id.value);
  update.run();
  if (db_->changes() == 0)
    throw DatabaseError(db_->path() + ": no run with id " + std::to_string(id.value));
}

void RunStore::delete_run(RunId id) {
  if (ingest_)
    throw DatabaseError(db_->path() + ": cannot delete runs while run " +
                        std::to_string(ingest_->run.value) + " is being written");
  Transaction transaction(*db_);
  auto erase = db_->prepare("DELETE FROM runs WHERE id = ?");
  erase.bind_int(1, id.value);
  erase.run();
  if (db_->changes() == 0)
    throw DatabaseError(db_->path() + ": no run with id " + std::to_string(id.value));
  transaction.commit();
}

// --- Reading a run ---

EventChunk RunStore::load_chunk(RunId run, std::uint64_t chunk_first) {
  auto query = db_->prepare("SELECT data FROM event_chunks WHERE run_id = ? AND first_event = ?");
  query.bind_int(1, run.value).bind_int(2, static_cast<std::int64_t>(chunk_first));
  if (!query.step())
    throw DatabaseError(db_->path() + ": run " + std::to_string(run.value) +
                        " has no event chunk at event " + std::to_string(chunk_first));
  return decode_chunk(query.column_blob(0), db_->path() + ": run " + std::to_string(run.value) +
                                                ", events from " + std::to_string(chunk_first));
}

std::vector<EventChunk> RunStore::load_chunks(RunId run, std::uint64_t first, std::uint64_t end) {
  // Chunks are aligned to kEventsPerChunk, so the ones covering [first, end) are known.
  std::vector<EventChunk> chunks;
  if (end <= first)
    return chunks;
  auto query = db_->prepare(
      "SELECT first_event, data FROM event_chunks WHERE run_id = ? AND first_event >= ? AND "
      "first_event < ? ORDER BY first_event");
  const std::uint64_t aligned = first - first % kEventsPerChunk;
  query.bind_int(1, run.value)
      .bind_int(2, static_cast<std::int64_t>(aligned))
      .bind_int(3, static_cast<std::int64_t>(end));
  while (query.step()) {
    chunks.push_back(decode_chunk(query.column_blob(1),
                                  db_->path() + ": run " + std::to_string(run.value) +
                                      ", events from " + std::to_string(query.column_int(0))));
  }
  return chunks;
}

std::vector<TraceEvent> RunStore::events(RunId run, std::uint64_t first, std::uint64_t end) {
  end = std::min(end, this->run(run).event_count);
  std::vector<TraceEvent> out;
  if (end <= first)
    return out;
  out.reserve(static_cast<std::size_t>(end - first));
  std::uint64_t index = first - first % kEventsPerChunk;
  for (const auto& chunk : load_chunks(run, first, end)) {
    for (const auto& event : chunk.events) {
      if (index >= first && index < end)
        out.push_back(event);
      ++index;
    }
  }
  return out;
}

std::vector<SeriesPoint> RunStore::series(RunId run, std::uint64_t first, std::uint64_t end) {
  end = std::min(end, this->run(run).event_count);
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

std::vector<LabelId> RunStore::labels_of_events(RunId run, std::uint64_t first, std::uint64_t end) {
  end = std::min(end, this->run(run).event_count);
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

std::vector<RunLabel> RunStore::labels(RunId run) {
  auto query =
      db_->prepare("SELECT id, category, op, layer FROM run_labels WHERE run_id = ? ORDER BY id");
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

std::vector<StackFrame> RunStore::frame_stack(RunId run, FrameStackId stack) {
  std::vector<StackFrame> frames;
  if (stack.value == 0)
    return frames;
  auto query = db_->prepare("SELECT frame_ids FROM frame_stacks WHERE run_id = ? AND id = ?");
  query.bind_int(1, run.value).bind_int(2, stack.value);
  if (!query.step())
    return frames;
  const auto blob = query.column_blob(0);
  const std::vector<std::uint8_t> ids(blob.begin(), blob.end());
  ByteReader in(ids, db_->path() + ": run " + std::to_string(run.value) + ", stack " +
                         std::to_string(stack.value));
  auto frame_query = db_->prepare(
      "SELECT f.line, file.text, name.text FROM frames f "
      "JOIN strings file ON file.run_id = f.run_id AND file.id = f.filename_id "
      "JOIN strings name ON name.run_id = f.run_id AND name.id = f.name_id "
      "WHERE f.run_id = ? AND f.id = ?");
  while (!in.at_end()) {
    frame_query.bind_int(1, run.value).bind_int(2, static_cast<std::int64_t>(in.varint()));
    if (!frame_query.step())
      in.fail("stack refers to a missing frame");
    frames.push_back(StackFrame{frame_query.column_text(1), frame_query.column_int(0),
                                frame_query.column_text(2)});
    frame_query.reset();
  }
  return frames;
}

std::vector<std::vector<StackFrame>> RunStore::frame_stacks(RunId run) {
  std::unordered_map<std::int64_t, std::string> strings;
  auto string_query = db_->prepare("SELECT id, text FROM strings WHERE run_id = ?");
  string_query.bind_int(1, run.value);
  while (string_query.step())
    strings[string_query.column_int(0)] = string_query.column_text(1);
  const std::string what = db_->path() + ": run " + std::to_string(run.value);
  auto text = [&](std::int64_t id) {
    auto it = strings.find(id);
    if (it == strings.end())
      throw DatabaseError(what + ": a frame refers to missing string " + std::to_string(id));
    return it->second;
  };
  std::unordered_map<std::int64_t, StackFrame> frames;
  auto frame_query =
      db_->prepare("SELECT id, filename_id, line, name_id FROM frames WHERE run_id = ?");
  frame_query.bind_int(1, run.value);
  while (frame_query.step()) {
    frames[frame_query.column_int(0)] =
        StackFrame{text(frame_query.column_int(1)), frame_query.column_int(2),
                   text(frame_query.column_int(3))};
  }
  std::vector<std::vector<StackFrame>> stacks;
  auto stack_query =
      db_->prepare("SELECT id, frame_ids FROM frame_stacks WHERE run_id = ? ORDER BY id");
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

std::vector<OomReport> RunStore::oom_reports(RunId run) {
  auto query = db_->prepare(
      "SELECT id, event_index, report FROM oom_reports WHERE run_id = ? ORDER BY event_index, id");
  query.bind_int(1, run.value);
  std::vector<OomReport> out;
  while (query.step()) {
    OomReport report;
    report.id = query.column_int(0);
    report.event_index = static_cast<std::uint64_t>(query.column_int(1));
    report.report =
        parse_json(query.column_text(2), db_->path() + ": OOM report " + std::to_string(report.id));
    out.push_back(std::move(report));
  }
  return out;
}

std::vector<TimelineBucket> RunStore::timeline(RunId run, std::size_t buckets) {
  return timeline(run, 0, this->run(run).event_count, buckets);
}

std::vector<TimelineBucket> RunStore::timeline(RunId run, std::uint64_t first, std::uint64_t end,
                                               std::size_t buckets) {
  end = std::min(end, this->run(run).event_count);
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
  auto top = db_->prepare("SELECT max(level) FROM timeline_levels WHERE run_id = ?");
  top.bind_int(1, run.value);
  top.step();
  const int top_level = static_cast<int>(top.column_int(0));
  int level = 0;
  while (level < top_level && level_bucket_events(level + 1) <= width)
    ++level;
  const std::uint64_t size = level_bucket_events(level);
  auto query = db_->prepare(
      "SELECT first_bucket, data FROM timeline_levels WHERE run_id = ? AND level = ? AND "
      "first_bucket <= ? AND first_bucket + bucket_count > ? ORDER BY first_bucket");
  query.bind_int(1, run.value)
      .bind_int(2, level)
      .bind_int(3, static_cast<std::int64_t>((end - 1) / size))
      .bind_int(4, static_cast<std::int64_t>(first / size));
  std::vector<TimelineBucket> source;
  while (query.step()) {
    auto row = decode_buckets(query.column_blob(1),
                              db_->path() + ": run " + std::to_string(run.value) +
                                  ", timeline level " + std::to_string(level) + " from bucket " +
                                  std::to_string(query.column_int(0)));
    source.insert(source.end(), row.begin(), row.end());
  }
  return regroup_buckets(source, first, end, buckets);
}

std::int64_t CategoryBucket::total() const {
  std::int64_t sum = 0;
  for (const auto value : bytes)
    sum += value;
  return sum;
}

std::vector<CategoryBucket> RunStore::category_timeline(RunId run, std::uint64_t first,
                                                        std::uint64_t end, std::size_t buckets) {
  end = std::min(end, this->run(run).event_count);
  std::vector<CategoryBucket> out;
  if (end <= first || buckets == 0)
    return out;
  buckets = static_cast<std::size_t>(std::min<std::uint64_t>(buckets, end - first));

  std::vector<Category> category_of_label;
  for (const auto& label : labels(run)) {
    if (category_of_label.size() <= label.id.value)
      category_of_label.resize(label.id.value + 1, Category::unknown);
    category_of_label[label.id.value] = label.label.category;
  }
  struct LiveAllocation {
    Category category;
    std::int64_t size;
  };
  std::unordered_map<std::uint64_t, LiveAllocation> live;
  std::array<std::int64_t, kCategoryCount> bytes{};
  // Blocks already live when the run's events begin (an imported, truncated trace).
  // Keep the state alive for the loop: ranging over a member of a temporary would dangle.
  const SegmentStateAt initial = segment_state(run, 0);
  for (const auto& [addr, block] : initial.state.blocks()) {
    live[addr] = {Category::unknown, static_cast<std::int64_t>(block.size)};
    bytes[0] += static_cast<std::int64_t>(block.size);
  }

  out.resize(buckets);
  std::vector<std::int64_t> best(buckets, -1);
  const std::uint64_t span = end - first;
  std::uint64_t index = 0;
  for (const auto& chunk : load_chunks(run, 0, end)) {
    for (std::size_t i = 0; i < chunk.events.size() && index < end; ++i, ++index) {
      const TraceEvent& event = chunk.events[i];
      if (event.action == TraceAction::alloc) {
        const std::uint32_t label = chunk.labels.empty() ? 0 : chunk.labels[i].value;
        const Category category =
            label < category_of_label.size() ? category_of_label[label] : Category::unknown;
        live[event.addr] = {category, static_cast<std::int64_t>(event.size)};
        bytes[static_cast<std::size_t>(category)] += static_cast<std::int64_t>(event.size);
      } else if (event.action == TraceAction::free_completed) {
        if (auto it = live.find(event.addr); it != live.end()) {
          bytes[static_cast<std::size_t>(it->second.category)] -= it->second.size;
          live.erase(it);
        }
      }
      if (index < first)
        continue;
      const auto b = static_cast<std::size_t>((index - first) * buckets / span);
      CategoryBucket& bucket = out[b];
      if (best[b] < 0) {
        bucket.first_event = index;
        bucket.t0_us = event.time_us;
      }
      bucket.end_event = index + 1;
      bucket.t1_us = event.time_us;
      std::int64_t total = 0;
      for (const auto value : bytes)
        total += value;
      if (total > best[b]) {
        best[b] = total;
        bucket.peak_event = index;
        bucket.bytes = bytes;
      }
    }
  }
  return out;
}

std::uint64_t RunStore::event_at_time(RunId run, std::int64_t time_us) {
  auto query = db_->prepare(
      "SELECT first_event FROM event_chunks WHERE run_id = ? AND last_time_us >= ? "
      "ORDER BY first_event LIMIT 1");
  query.bind_int(1, run.value).bind_int(2, time_us);
  if (!query.step())
    return this->run(run).event_count;
  const auto chunk_first = static_cast<std::uint64_t>(query.column_int(0));
  const EventChunk chunk = load_chunk(run, chunk_first);
  for (std::size_t i = 0; i < chunk.events.size(); ++i) {
    if (chunk.events[i].time_us >= time_us)
      return chunk_first + i;
  }
  return chunk_first + chunk.events.size();
}

SegmentStateAt RunStore::segment_state(RunId run, std::uint64_t event_index) {
  event_index = std::min(event_index, this->run(run).event_count);
  auto query = db_->prepare(
      "SELECT event_index, data FROM segment_keyframes WHERE run_id = ? AND event_index <= ? "
      "ORDER BY event_index DESC LIMIT 1");
  query.bind_int(1, run.value).bind_int(2, static_cast<std::int64_t>(event_index));
  if (!query.step())
    throw DatabaseError(db_->path() + ": run " + std::to_string(run.value) +
                        " has no segment keyframe");
  const auto keyframe_index = static_cast<std::uint64_t>(query.column_int(0));
  SegmentStateAt at;
  at.event_index = event_index;
  at.state = SegmentMap::deserialize(query.column_blob(1),
                                     db_->path() + ": run " + std::to_string(run.value) +
                                         ", keyframe at event " + std::to_string(keyframe_index));
  if (event_index > keyframe_index) {
    const EventChunk chunk = load_chunk(run, keyframe_index);
    const auto count = static_cast<std::size_t>(event_index - keyframe_index);
    for (std::size_t i = 0; i < count && i < chunk.events.size(); ++i)
      at.state.apply(chunk.events[i]);
  }
  return at;
}

// --- Comparisons and reports ---

ComparisonId RunStore::save_comparison(const std::string& name, std::span<const RunId> runs,
                                       const nlohmann::json& result) {
  Transaction transaction(*db_);
  for (const RunId run : runs)
    require_run(run);
  auto insert = db_->prepare("INSERT INTO comparisons(name, result, created_at) VALUES (?, ?, ?)");
  insert.bind_text(1, name).bind_text(2, result.dump()).bind_text(3, now_iso8601());
  insert.run();
  const ComparisonId id{db_->last_insert_rowid()};
  auto member =
      db_->prepare("INSERT INTO comparison_runs(comparison_id, position, run_id) VALUES (?, ?, ?)");
  for (std::size_t i = 0; i < runs.size(); ++i) {
    member.bind_int(1, id.value)
        .bind_int(2, static_cast<std::int64_t>(i))
        .bind_int(3, runs[i].value);
    member.run();
    member.reset();
  }
  transaction.commit();
  return id;
}

std::vector<ComparisonRecord> RunStore::list_comparisons() {
  auto query = db_->prepare("SELECT id, name, result, created_at FROM comparisons ORDER BY id");
  auto members =
      db_->prepare("SELECT run_id FROM comparison_runs WHERE comparison_id = ? ORDER BY position");
  std::vector<ComparisonRecord> out;
  while (query.step()) {
    ComparisonRecord record;
    record.id = ComparisonId{query.column_int(0)};
    record.name = query.column_text(1);
    record.result = parse_json(query.column_text(2),
                               db_->path() + ": comparison " + std::to_string(record.id.value));
    record.created_at = query.column_text(3);
    members.bind_int(1, record.id.value);
    while (members.step())
      record.runs.push_back(RunId{members.column_int(0)});
    members.reset();
    out.push_back(std::move(record));
  }
  return out;
}

ReportId RunStore::save_report(std::optional<ComparisonId> comparison, const std::string& title,
                               const std::string& format, const std::string& content) {
  auto insert = db_->prepare(
      "INSERT INTO reports(comparison_id, title, format, content, created_at) "
      "VALUES (?, ?, ?, ?, ?)");
  if (comparison)
    insert.bind_int(1, comparison->value);
  else
    insert.bind_null(1);
  insert.bind_text(2, title)
      .bind_text(3, format)
      .bind_blob(4,
                 std::span(reinterpret_cast<const std::uint8_t*>(content.data()), content.size()))
      .bind_text(5, now_iso8601());
  insert.run();
  return ReportId{db_->last_insert_rowid()};
}

std::vector<ReportRecord> RunStore::list_reports() {
  auto query = db_->prepare(
      "SELECT id, comparison_id, title, format, content, created_at FROM reports ORDER BY id");
  std::vector<ReportRecord> out;
  while (query.step()) {
    ReportRecord record;
    record.id = ReportId{query.column_int(0)};
    if (!query.column_is_null(1))
      record.comparison = ComparisonId{query.column_int(1)};
    record.title = query.column_text(2);
    record.format = query.column_text(3);
    const auto content = query.column_blob(4);
    record.content.assign(content.begin(), content.end());
    record.created_at = query.column_text(5);
    out.push_back(std::move(record));
  }
  return out;
}

ReportRecord RunStore::report(ReportId id) {
  for (auto& record : list_reports()) {
    if (record.id == id)
      return record;
  }
  throw DatabaseError(db_->path() + ": no report with id " + std::to_string(id.value));
}

void RunStore::vacuum() {
  if (ingest_)
    throw DatabaseError(db_->path() + ": cannot vacuum while a run is being written");
  db_->exec("VACUUM");
  if (db_->path() != ":memory:")
    db_->exec("PRAGMA wal_checkpoint(TRUNCATE)");
}

}  // namespace fragscope::storage
