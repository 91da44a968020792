#pragma once
// RunCatalog: what a store holds, by name and id: experiments, the runs (their records, not their
// events), comparisons and reports. The records here are the vocabulary every part of a store
// shares; RunReader (run_reader.h) reads a run's events and what was derived from them at ingest,
// RunWriter (run_writer.h) stores a run. Each works on a Database it does not own; RunStore
// (run_store.h) is one connection with all three.
//
// Use a catalog from one thread at a time, as its Database.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/strong_id.h"
#include "engine/core/units.h"
#include "storage/db/database.h"

namespace fragscope::storage {

struct RunTag {};
struct ExperimentTag {};
struct ComparisonTag {};
struct ReportTag {};
using RunId = StrongId<RunTag, std::int64_t>;
using ExperimentId = StrongId<ExperimentTag, std::int64_t>;
using ComparisonId = StrongId<ComparisonTag, std::int64_t>;
using ReportId = StrongId<ReportTag, std::int64_t>;

// Where a run's events came from.
enum class RunSource : std::uint8_t {
  simulated,  // the allocator model
  imported,   // a PyTorch snapshot file
  gpu,        // FragScope's own CUDA backend on a real device
  torch,      // recorded by PyTorch under FragScope's control
};
enum class RunStatus : std::uint8_t { ok, oom, cancelled, failed };

std::string_view to_string(RunSource source);
std::string_view to_string(RunStatus status);
std::optional<RunSource> run_source_from_string(std::string_view text);
std::optional<RunStatus> run_status_from_string(std::string_view text);

// What the run ran on and with, so two runs can be told apart months later.
struct Environment {
  std::string torch_version;
  std::string cuda_version;
  std::string driver_version;
  std::string gpu_name;
  Bytes gpu_memory = 0;
  std::string fragscope_version;
  std::string git_revision;
  std::string host;

  // This build's version and revision and this machine's host name; the rest left empty.
  static Environment current();
  friend bool operator==(const Environment&, const Environment&) = default;
};

struct RunRecord {
  RunId id{};  // assigned by RunWriter::begin_run
  std::optional<ExperimentId> experiment;
  std::string name;
  RunSource source = RunSource::simulated;
  std::string alloc_conf;  // PYTORCH_CUDA_ALLOC_CONF as given
  Bytes capacity = 0;      // device bytes the allocator could use; 0 = unknown
  std::string device_name;
  RunStatus status = RunStatus::ok;
  std::string created_at;  // ISO 8601 UTC, set by begin_run
  double wall_seconds = 0;
  Environment environment;
  std::optional<RunId> twin_run;  // a real run's simulated twin
  // Summary metrics: finish_run() merges the caller's JSON with "peaks" (max of every series)
  // and "events"; callers add e.g. "memory_stats".
  nlohmann::json summary = nlohmann::json::object();
  std::uint64_t event_count = 0;

  friend bool operator==(const RunRecord&, const RunRecord&) = default;
};

struct ExperimentRecord {
  ExperimentId id{};
  std::string name;
  nlohmann::json definition = nlohmann::json::object();
  std::string created_at;
};

struct ComparisonRecord {
  ComparisonId id{};
  std::string name;
  std::vector<RunId> runs;
  nlohmann::json result = nlohmann::json::object();
  std::string created_at;
};

struct ReportRecord {
  ReportId id{};
  std::optional<ComparisonId> comparison;
  std::string title;
  std::string format;  // "html", "pdf", "json", ...
  std::string content;
  std::string created_at;
};

class RunCatalog {
 public:
  explicit RunCatalog(Database& db) : db_(db) {}

  // --- Experiments ---
  ExperimentId create_experiment(const std::string& name, const nlohmann::json& definition);
  std::vector<ExperimentRecord> list_experiments();
  ExperimentRecord experiment(ExperimentId id);
  // Deletes the experiment and all of its runs.
  void delete_experiment(ExperimentId id);

  // --- Runs ---
  std::vector<RunRecord> list_runs();
  std::vector<RunRecord> runs_of(ExperimentId experiment);
  std::int64_t run_count();
  // Throws DatabaseError naming the id when there is no such run.
  RunRecord run(RunId id);
  bool has_run(RunId id);
  void rename_run(RunId id, const std::string& name);
  void set_twin(RunId real_run, std::optional<RunId> simulated_twin);
  void update_summary(RunId id, const nlohmann::json& summary);
  // Removes the run and every row that belongs to it (not while a run is being written on this
  // connection).
  void delete_run(RunId id);

  // --- Comparisons and reports ---
  ComparisonId save_comparison(const std::string& name, std::span<const RunId> runs,
                               const nlohmann::json& result);
  std::vector<ComparisonRecord> list_comparisons();
  ReportId save_report(std::optional<ComparisonId> comparison, const std::string& title,
                       const std::string& format, const std::string& content);
  std::vector<ReportRecord> list_reports();
  ReportRecord report(ReportId id);

  // Rebuilds the file to its smallest size (not while a run is being written on this connection),
  // with kNewFilePageSize pages when no other connection is using it.
  struct VacuumResult {
    std::int64_t page_size_before = 0;
    std::int64_t page_size_after = 0;
    // Why the pages kept a size other than kNewFilePageSize's ("" when they did not).
    std::string pages_kept_because;
    // False when another connection opened the file while it was out of WAL mode for the new page
    // size: it stays in rollback-journal mode until the next writable open switches it back.
    bool in_wal_mode = true;
  };
  VacuumResult vacuum();

 private:
  Database& db_;
};

}  // namespace fragscope::storage
