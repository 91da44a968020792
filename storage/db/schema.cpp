#include "storage/db/schema.h"

#include <array>
#include <filesystem>
#include <string_view>

namespace fragscope::storage {
namespace {

// Migration i brings a database from version i to version i + 1. Never edit a published
// migration: add a new one, so that every database ever written can still be brought forward.
constexpr std::array<std::string_view, 10> kMigrations = {
    // 1: experiments, runs with their environment fingerprint, events in packed chunks, and the
    // interned strings / frames / stacks that events refer to.
    R"sql(
CREATE TABLE experiments(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  definition TEXT NOT NULL DEFAULT '{}',
  created_at TEXT NOT NULL);
CREATE TABLE runs(
  id INTEGER PRIMARY KEY,
  experiment_id INTEGER REFERENCES experiments(id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  source TEXT NOT NULL CHECK (source IN ('simulated', 'imported', 'gpu', 'torch')),
  alloc_config TEXT NOT NULL DEFAULT '',
  capacity INTEGER NOT NULL DEFAULT 0,
  device_name TEXT NOT NULL DEFAULT '',
  status TEXT NOT NULL CHECK (status IN ('ok', 'oom', 'cancelled', 'failed')),
  created_at TEXT NOT NULL,
  wall_seconds REAL NOT NULL DEFAULT 0,
  torch_version TEXT NOT NULL DEFAULT '',
  cuda_version TEXT NOT NULL DEFAULT '',
  driver_version TEXT NOT NULL DEFAULT '',
  gpu_name TEXT NOT NULL DEFAULT '',
  gpu_memory INTEGER NOT NULL DEFAULT 0,
  fragscope_version TEXT NOT NULL DEFAULT '',
  git_revision TEXT NOT NULL DEFAULT '',
  host TEXT NOT NULL DEFAULT '',
  twin_run INTEGER REFERENCES runs(id) ON DELETE SET NULL,
  summary TEXT NOT NULL DEFAULT '{}',
  event_count INTEGER NOT NULL DEFAULT 0);
CREATE INDEX runs_by_experiment ON runs(experiment_id);
CREATE INDEX runs_by_twin ON runs(twin_run);
CREATE TABLE event_chunks(
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  first_event INTEGER NOT NULL,
  event_count INTEGER NOT NULL,
  first_time_us INTEGER NOT NULL,
  last_time_us INTEGER NOT NULL,
  data BLOB NOT NULL,
  UNIQUE (run_id, first_event));
CREATE TABLE strings(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  id INTEGER NOT NULL,
  text TEXT NOT NULL,
  PRIMARY KEY (run_id, id)) WITHOUT ROWID;
CREATE TABLE frames(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  id INTEGER NOT NULL,
  filename_id INTEGER NOT NULL,
  line INTEGER NOT NULL,
  name_id INTEGER NOT NULL,
  PRIMARY KEY (run_id, id)) WITHOUT ROWID;
CREATE TABLE frame_stacks(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  id INTEGER NOT NULL,
  frame_ids BLOB NOT NULL,
  PRIMARY KEY (run_id, id)) WITHOUT ROWID;
)sql",
    // 2: what the GUI reads without decoding events: the peak-preserving timeline pyramid,
    // segment keyframes, OOM reports, and the labels (categories) of simulated allocations.
    R"sql(
CREATE TABLE timeline_levels(
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  level INTEGER NOT NULL,
  first_bucket INTEGER NOT NULL,
  bucket_count INTEGER NOT NULL,
  data BLOB NOT NULL,
  UNIQUE (run_id, level, first_bucket));
CREATE TABLE segment_keyframes(
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  event_index INTEGER NOT NULL,
  data BLOB NOT NULL,
  UNIQUE (run_id, event_index));
CREATE TABLE oom_reports(
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  event_index INTEGER NOT NULL,
  report TEXT NOT NULL);
CREATE INDEX oom_reports_by_run ON oom_reports(run_id, event_index);
CREATE TABLE run_labels(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  id INTEGER NOT NULL,
  category TEXT NOT NULL,
  op TEXT NOT NULL,
  layer INTEGER NOT NULL,
  PRIMARY KEY (run_id, id)) WITHOUT ROWID;
)sql",
    // 3: comparisons between runs and the reports exported from them.
    R"sql(
CREATE TABLE comparisons(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  result TEXT NOT NULL DEFAULT '{}',
  created_at TEXT NOT NULL);
CREATE TABLE comparison_runs(
  comparison_id INTEGER NOT NULL REFERENCES comparisons(id) ON DELETE CASCADE,
  position INTEGER NOT NULL,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  PRIMARY KEY (comparison_id, position)) WITHOUT ROWID;
CREATE INDEX comparison_runs_by_run ON comparison_runs(run_id);
CREATE TABLE reports(
  id INTEGER PRIMARY KEY,
  comparison_id INTEGER REFERENCES comparisons(id) ON DELETE SET NULL,
  title TEXT NOT NULL,
  format TEXT NOT NULL,
  content BLOB NOT NULL,
  created_at TEXT NOT NULL);
)sql",
    // 4: multi-rank jobs (DDP, FSDP, ZeRO): one run per rank, linked to the job; and where a
    // collected Slurm task's run came from, so that collecting twice imports nothing twice.
    R"sql(
CREATE TABLE jobs(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  world_size INTEGER NOT NULL DEFAULT 0,
  origin TEXT NOT NULL DEFAULT '',
  created_at TEXT NOT NULL);
CREATE TABLE job_ranks(
  job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  rank INTEGER NOT NULL,
  local_rank INTEGER,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  PRIMARY KEY (job_id, rank)) WITHOUT ROWID;
CREATE INDEX job_ranks_by_run ON job_ranks(run_id);
CREATE TABLE sweep_tasks(
  sweep_dir TEXT NOT NULL,
  task INTEGER NOT NULL,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  collected_at TEXT NOT NULL,
  PRIMARY KEY (sweep_dir, task)) WITHOUT ROWID;
CREATE INDEX sweep_tasks_by_run ON sweep_tasks(run_id);
)sql",
    // 5: whether an experiment holds all of its points: a run killed (or out of disk) halfway
    // leaves it 'incomplete', visibly. Experiments written before this version count as complete.
    R"sql(
ALTER TABLE experiments ADD COLUMN status TEXT NOT NULL DEFAULT 'complete'
  CHECK (status IN ('complete', 'incomplete'));
ALTER TABLE experiments ADD COLUMN expected_points INTEGER NOT NULL DEFAULT 0;
)sql",
    // 6: the environment fingerprint a run was recorded in (fragscope-record's NAME.env.json,
    // kept whole as JSON: Python, the PyTorch build and how it was installed, CUDA, packages).
    R"sql(
CREATE TABLE run_environments(
  run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
  source_file TEXT NOT NULL DEFAULT '',
  fingerprint TEXT NOT NULL);
)sql",
    // 7: memory by category written at ingest (category_pyramid.h), so zooming the category
    // plot of a long run is a query. Runs stored before have no rows and are replayed instead.
    R"sql(
CREATE TABLE category_chunks(
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  first_event INTEGER NOT NULL,
  data BLOB NOT NULL,
  UNIQUE (run_id, first_event));
CREATE TABLE category_levels(
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  level INTEGER NOT NULL,
  first_bucket INTEGER NOT NULL,
  bucket_count INTEGER NOT NULL,
  data BLOB NOT NULL,
  UNIQUE (run_id, level, first_bucket));
)sql",
    // 8: one name for the allocator config everywhere (the experiment key, the CLI, the JSON):
    // runs.alloc_config becomes runs.alloc_conf.
    R"sql(
ALTER TABLE runs RENAME COLUMN alloc_config TO alloc_conf;
)sql",
    // 9: where a run's trace ran out of memory (its TraceAction::oom events), written at ingest
    // beside summary["overview"] (the trace's time range), so opening a run is a query instead of
    // a decode of every chunk. Runs stored before have no summary["overview"] and are scanned.
    R"sql(
CREATE TABLE oom_events(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  event_index INTEGER NOT NULL,
  PRIMARY KEY (run_id, event_index)) WITHOUT ROWID;
)sql",
    // 10: allocator-state keyframes (stats_keyframes.h): the model's blocks and memory_stats()
    // every few thousand events, so the Summary at any cursor replays only from the one before.
    // Runs stored before have none and are replayed from event 0.
    R"sql(
CREATE TABLE stats_keyframes(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  event_index INTEGER NOT NULL,
  data BLOB NOT NULL,
  PRIMARY KEY (run_id, event_index)) WITHOUT ROWID;
)sql",
};

// True when the file holds tables although it was never a FragScope database.
bool has_foreign_tables(Database& db) {
  return db.query_int("SELECT count(*) FROM sqlite_schema") > 0;
}

// The last writer died: before writing into the file, make sure its b-trees are sound (a damaged
// page would otherwise go unnoticed until a read of that run, and new rows would be written
// into a broken tree).
void check_after_crash(Database& db) {
  std::string verdict;
  try {
    auto check = db.prepare("PRAGMA quick_check(3)");
    while (check.step()) {
      verdict += (verdict.empty() ? "" : "; ") + check.column_text(0);
    }
  } catch (const DatabaseFullError&) {
    throw;
  } catch (const DatabaseError& e) {
    verdict = e.what();
  }
  if (verdict != "ok") {
    throw DatabaseError(db.path() + ": the database is damaged (found after an unclean " +
                        "shutdown: " + verdict.substr(0, 300) + "); nothing was written to it. " +
                        "Recover what is readable with `sqlite3 " + db.path() +
                        " .recover | sqlite3 NEW.db`, or restore a backup");
  }
}

}  // namespace

int latest_schema_version() {
  return static_cast<int>(kMigrations.size());
}

int schema_version(Database& db) {
  return static_cast<int>(db.query_int("PRAGMA user_version"));
}

void migrate_to(Database& db, int target) {
  const int from = schema_version(db);
  if (from < 0 || target > latest_schema_version()) {
    throw DatabaseError(db.path() + ": cannot migrate from schema version " + std::to_string(from) +
                        " to " + std::to_string(target));
  }
  for (int version = from; version < target; ++version) {
    Transaction transaction(db);
    db.exec(kMigrations[static_cast<std::size_t>(version)]);
    if (version == 0)
      db.exec("PRAGMA application_id = " + std::to_string(kApplicationId));
    db.exec("PRAGMA user_version = " + std::to_string(version + 1));
    transaction.commit();
  }
}

std::unique_ptr<Database> open_store_database(const std::string& path, OpenMode mode) {
  if (mode == OpenMode::read_write_create && path != ":memory:" && !path.empty()) {
    // The default location (~/.local/share/fragscope/) may not exist yet on a fresh machine.
    const auto parent = std::filesystem::path(path).parent_path();
    std::error_code ignored;
    if (!parent.empty())
      std::filesystem::create_directories(parent, ignored);
  }
  const bool unclean = mode != OpenMode::read_only && left_by_crashed_writer(path);
  auto db = std::make_unique<Database>(path, mode);
  // Reading the header first also turns "not a database" into a clear error before any write.
  const int version = schema_version(*db);
  const int latest = latest_schema_version();
  if (version < 0) {
    // FragScope never writes a negative version; indexing the migrations with it ran past the
    // table's start.
    throw DatabaseError(path + ": schema version " + std::to_string(version) +
                        " is not one FragScope writes (an SQLite database, but not FragScope's); " +
                        "the file was not modified");
  }
  if (version > latest) {
    throw SchemaTooNewError(path + ": database schema version " + std::to_string(version) +
                            " was written by a newer FragScope (this build reads up to version " +
                            std::to_string(latest) + "); the file was not modified");
  }
  const auto application_id = db->query_int("PRAGMA application_id");
  if ((version > 0 && application_id != kApplicationId) ||
      (version == 0 && (application_id != 0 || has_foreign_tables(*db)))) {
    throw DatabaseError(path + ": an SQLite database, but not FragScope's; the file was not " +
                        "modified");
  }
  if (unclean && !db->read_only())
    check_after_crash(*db);
  db->exec("PRAGMA foreign_keys = ON");
  if (db->read_only()) {
    if (version < latest) {
      throw DatabaseError(path + ": read-only, and its schema (version " + std::to_string(version) +
                          ") needs upgrading to version " + std::to_string(latest) +
                          "; open it writable once");
    }
    return db;
  }
  if (path != ":memory:" && !path.empty()) {
    // A new file's pages are 16 KiB: ingest writes megabytes of blobs, and with 4 KiB pages
    // SQLite's work per page (WAL frames, the checkpoint's copies) made the writing thread's CPU
    // time 1.4 times as long. A file that exists keeps the size it was made with.
    if (version == 0)
      db->exec("PRAGMA page_size = " + std::to_string(kNewFilePageSize));
    // WAL lets the GUI read while a run is being written; NORMAL sync is crash-safe in WAL mode.
    db->exec("PRAGMA journal_mode = WAL");
    db->exec("PRAGMA synchronous = NORMAL");
  }
  migrate_to(*db, latest);
  return db;
}

}  // namespace fragscope::storage
