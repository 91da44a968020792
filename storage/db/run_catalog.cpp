// RunCatalog: experiments, the list of runs, comparisons and reports; and the helpers the three
// concerns of a store share (run_store_internal.h).
#include "storage/db/run_catalog.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <ctime>
#include <string>

#include "fragscope/version.h"
#include "storage/db/run_store_internal.h"
#include "storage/db/schema.h"

namespace fragscope::storage {

using run_store_detail::now_iso8601;
using run_store_detail::parse_json;

namespace {

constexpr std::array<std::string_view, 4> kSourceNames = {"simulated", "imported", "gpu", "torch"};
constexpr std::array<std::string_view, 4> kStatusNames = {"ok", "oom", "cancelled", "failed"};
constexpr std::string_view kRunColumns =
    "id, experiment_id, name, source, alloc_conf, capacity, device_name, status, created_at, "
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
  run.alloc_conf = row.column_text(4);
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

namespace run_store_detail {

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

void require_run(Database& db, RunId id) {
  auto query = db.prepare("SELECT 1 FROM runs WHERE id = ?");
  query.bind_int(1, id.value);
  if (!query.step())
    throw DatabaseError(db.path() + ": no run with id " + std::to_string(id.value));
}

nlohmann::json parse_json(const std::string& text, const std::string& what) {
  auto value = nlohmann::json::parse(text, nullptr, false);
  if (value.is_discarded())
    throw DatabaseError(what + ": stored JSON is corrupt");
  return value;
}

}  // namespace run_store_detail

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

// --- Experiments ---

ExperimentId RunCatalog::create_experiment(const std::string& name,
                                           const nlohmann::json& definition) {
  auto insert =
      db_.prepare("INSERT INTO experiments(name, definition, created_at) VALUES (?, ?, ?)");
  insert.bind_text(1, name).bind_text(2, definition.dump()).bind_text(3, now_iso8601());
  insert.run();
  return ExperimentId{db_.last_insert_rowid()};
}

std::vector<ExperimentRecord> RunCatalog::list_experiments() {
  auto query = db_.prepare("SELECT id, name, definition, created_at FROM experiments ORDER BY id");
  std::vector<ExperimentRecord> all;
  while (query.step()) {
    ExperimentRecord record;
    record.id = ExperimentId{query.column_int(0)};
    record.name = query.column_text(1);
    record.definition = parse_json(query.column_text(2),
                                   db_.path() + ": experiment " + std::to_string(record.id.value));
    record.created_at = query.column_text(3);
    all.push_back(std::move(record));
  }
  return all;
}

ExperimentRecord RunCatalog::experiment(ExperimentId id) {
  for (auto& record : list_experiments()) {
    if (record.id == id)
      return record;
  }
  throw DatabaseError(db_.path() + ": no experiment with id " + std::to_string(id.value));
}

void RunCatalog::delete_experiment(ExperimentId id) {
  auto erase = db_.prepare("DELETE FROM experiments WHERE id = ?");
  erase.bind_int(1, id.value);
  erase.run();
  if (db_.changes() == 0)
    throw DatabaseError(db_.path() + ": no experiment with id " + std::to_string(id.value));
}
// --- Runs ---

std::vector<RunRecord> RunCatalog::list_runs() {
  auto query = db_.prepare("SELECT " + std::string(kRunColumns) + " FROM runs ORDER BY id");
  std::vector<RunRecord> runs;
  while (query.step())
    runs.push_back(read_run(query, db_.path()));
  return runs;
}

std::vector<RunRecord> RunCatalog::runs_of(ExperimentId experiment) {
  auto query = db_.prepare("SELECT " + std::string(kRunColumns) +
                           " FROM runs WHERE experiment_id = ? ORDER BY id");
  query.bind_int(1, experiment.value);
  std::vector<RunRecord> runs;
  while (query.step())
    runs.push_back(read_run(query, db_.path()));
  return runs;
}

std::int64_t RunCatalog::run_count() {
  return db_.query_int("SELECT count(*) FROM runs");
}

RunRecord RunCatalog::run(RunId id) {
  auto query = db_.prepare("SELECT " + std::string(kRunColumns) + " FROM runs WHERE id = ?");
  query.bind_int(1, id.value);
  if (!query.step())
    throw DatabaseError(db_.path() + ": no run with id " + std::to_string(id.value));
  return read_run(query, db_.path());
}

bool RunCatalog::has_run(RunId id) {
  auto query = db_.prepare("SELECT 1 FROM runs WHERE id = ?");
  query.bind_int(1, id.value);
  return query.step();
}

void RunCatalog::rename_run(RunId id, const std::string& name) {
  auto update = db_.prepare("UPDATE runs SET name = ? WHERE id = ?");
  update.bind_text(1, name).bind_int(2, id.value);
  update.run();
  if (db_.changes() == 0)
    throw DatabaseError(db_.path() + ": no run with id " + std::to_string(id.value));
}

void RunCatalog::set_twin(RunId real_run, std::optional<RunId> simulated_twin) {
  run_store_detail::require_run(db_, real_run);
  if (simulated_twin)
    run_store_detail::require_run(db_, *simulated_twin);
  auto update = db_.prepare("UPDATE runs SET twin_run = ? WHERE id = ?");
  if (simulated_twin)
    update.bind_int(1, simulated_twin->value);
  else
    update.bind_null(1);
  update.bind_int(2, real_run.value);
  update.run();
}

void RunCatalog::update_summary(RunId id, const nlohmann::json& summary) {
  auto update = db_.prepare("UPDATE runs SET summary = ? WHERE id = ?");
  update.bind_text(1, summary.dump()).bind_int(2, id.value);
  update.run();
  if (db_.changes() == 0)
    throw DatabaseError(db_.path() + ": no run with id " + std::to_string(id.value));
}

void RunCatalog::delete_run(RunId id) {
  if (db_.in_transaction())
    throw DatabaseError(db_.path() + ": cannot delete runs while a run is being written");
  Transaction transaction(db_);
  auto erase = db_.prepare("DELETE FROM runs WHERE id = ?");
  erase.bind_int(1, id.value);
  erase.run();
  if (db_.changes() == 0)
    throw DatabaseError(db_.path() + ": no run with id " + std::to_string(id.value));
  transaction.commit();
}
// --- Comparisons and reports ---

ComparisonId RunCatalog::save_comparison(const std::string& name, std::span<const RunId> runs,
                                         const nlohmann::json& result) {
  Transaction transaction(db_);
  for (const RunId run : runs)
    run_store_detail::require_run(db_, run);
  auto insert = db_.prepare("INSERT INTO comparisons(name, result, created_at) VALUES (?, ?, ?)");
  insert.bind_text(1, name).bind_text(2, result.dump()).bind_text(3, now_iso8601());
  insert.run();
  const ComparisonId id{db_.last_insert_rowid()};
  auto member =
      db_.prepare("INSERT INTO comparison_runs(comparison_id, position, run_id) VALUES (?, ?, ?)");
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

std::vector<ComparisonRecord> RunCatalog::list_comparisons() {
  auto query = db_.prepare("SELECT id, name, result, created_at FROM comparisons ORDER BY id");
  auto members =
      db_.prepare("SELECT run_id FROM comparison_runs WHERE comparison_id = ? ORDER BY position");
  std::vector<ComparisonRecord> out;
  while (query.step()) {
    ComparisonRecord record;
    record.id = ComparisonId{query.column_int(0)};
    record.name = query.column_text(1);
    record.result = parse_json(query.column_text(2),
                               db_.path() + ": comparison " + std::to_string(record.id.value));
    record.created_at = query.column_text(3);
    members.bind_int(1, record.id.value);
    while (members.step())
      record.runs.push_back(RunId{members.column_int(0)});
    members.reset();
    out.push_back(std::move(record));
  }
  return out;
}

ReportId RunCatalog::save_report(std::optional<ComparisonId> comparison, const std::string& title,
                                 const std::string& format, const std::string& content) {
  auto insert = db_.prepare(
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
  return ReportId{db_.last_insert_rowid()};
}

std::vector<ReportRecord> RunCatalog::list_reports() {
  auto query = db_.prepare(
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

ReportRecord RunCatalog::report(ReportId id) {
  for (auto& record : list_reports()) {
    if (record.id == id)
      return record;
  }
  throw DatabaseError(db_.path() + ": no report with id " + std::to_string(id.value));
}

namespace {

// PRAGMA journal_mode = `mode`: "" once the file is in it, else why not. Leaving WAL needs the
// file to this connection alone, and SQLite does not wait for that (no busy handler).
std::string set_journal_mode(Database& db, const std::string& mode) {
  try {
    auto query = db.prepare("PRAGMA journal_mode = " + mode);
    if (query.step() && query.column_text(0) == mode)
      return "";
  } catch (const DatabaseError& error) {
    const std::string what = error.what();
    if (what.find("locked") == std::string::npos && what.find("busy") == std::string::npos)
      return what;
  }
  return "another program is using the file; vacuum again once it is closed";
}

}  // namespace

RunCatalog::VacuumResult RunCatalog::vacuum() {
  if (db_.in_transaction())
    throw DatabaseError(db_.path() + ": cannot vacuum while a run is being written");
  VacuumResult result;
  result.page_size_before = db_.query_int("PRAGMA page_size");
  if (db_.path() == ":memory:") {
    db_.exec("VACUUM");
    result.page_size_after = result.page_size_before;
    return result;
  }
  // A store made with smaller pages is rebuilt with kNewFilePageSize's, which its ingest writes
  // faster (schema.cpp). SQLite changes the page size only outside WAL, where the rebuild syncs
  // as a rollback journal needs (FULL; WAL's NORMAL is not enough there).
  bool resize = false;
  if (result.page_size_before != kNewFilePageSize) {
    result.pages_kept_because = set_journal_mode(db_, "delete");
    resize = result.pages_kept_because.empty();
  }
  const auto back_to_wal = [&] {
    db_.exec("PRAGMA synchronous = NORMAL");
    // Were another connection to have opened the file meanwhile, the next writable open
    // (open_store_database) switches it.
    result.in_wal_mode = set_journal_mode(db_, "wal").empty();
  };
  if (resize) {
    db_.exec("PRAGMA synchronous = FULL");
    db_.exec("PRAGMA page_size = " + std::to_string(kNewFilePageSize));
  }
  try {
    db_.exec("VACUUM");
  } catch (...) {
    if (resize)
      back_to_wal();
    throw;
  }
  if (resize)
    back_to_wal();
  db_.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  result.page_size_after = db_.query_int("PRAGMA page_size");
  return result;
}
}  // namespace fragscope::storage
