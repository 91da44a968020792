#pragma once
// RunStore: every experiment, run, event, timeline, segment keyframe, OOM report, comparison and
// report FragScope keeps, in one SQLite database (schema.h). The GUI browses it, the CLI and the
// experiment runner write it.
//
// Ingest is one transaction per run: begin_run(), append_events() any number of times,
// finish_run(). Until finish_run() commits, no other connection sees the run, and if the process
// dies (or cancel_run() is called, or the RunStore is destroyed) the run is absent. Readers in
// other RunStores on the same file keep working while a run is written (WAL).
//
// A RunStore is one connection: use it from one thread at a time; give each thread its own.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/cancel.h"
#include "engine/core/frame.h"
#include "engine/core/progress.h"
#include "engine/core/request.h"
#include "engine/core/strong_id.h"
#include "engine/core/trace.h"
#include "storage/db/category_pyramid.h"
#include "storage/db/database.h"
#include "storage/db/event_chunk.h"
#include "storage/db/segment_map.h"
#include "storage/db/timeline.h"

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
  RunId id{};  // assigned by begin_run
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

// A run's label table (RequestStream::labels): the category of each labelled allocation.
struct RunLabel {
  LabelId id{};
  RequestLabel label;
};

struct OomReport {
  std::int64_t id = 0;
  std::uint64_t event_index = 0;
  nlohmann::json report;
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

// What opening a run shows before any event is decoded, stored at ingest (schema 8).
struct EventOverview {
  std::vector<std::uint64_t> oom_events;  // indices of the trace's TraceAction::oom events
  std::int64_t first_time_us = 0;         // the first and last event times; 0 = no times
  std::int64_t last_time_us = 0;
};

// Optional per-event columns that go with a batch of events.
struct EventColumns {
  // The series after each event, when the producer knows them exactly (the allocator model
  // knows block sizes); empty = derived from the trace (derive_series()).
  std::span<const SeriesPoint> series;
  // The label of each event (0 = none); empty = no labels.
  std::span<const LabelId> labels;
};

class RunStore;

// The one stage RunStore::category_timeline reports, for fraction_progress.
inline constexpr ProgressStage kCategoryTimelineStages[] = {{"categories", 1}};

// Opens the store at `path` for a command: with `must_exist`, a missing file is a DatabaseError
// "no such database" instead of a new, empty database.
std::unique_ptr<RunStore> open_run_store(const std::string& path, OpenMode mode, bool must_exist);

class RunStore {
 public:
  // Opens (creating and migrating as needed) the database at `path`; ":memory:" for tests.
  explicit RunStore(const std::string& path, OpenMode mode = OpenMode::read_write_create);
  ~RunStore();
  RunStore(const RunStore&) = delete;
  RunStore& operator=(const RunStore&) = delete;

  Database& database() { return *db_; }

  // --- Experiments ---
  ExperimentId create_experiment(const std::string& name, const nlohmann::json& definition);
  std::vector<ExperimentRecord> list_experiments();
  ExperimentRecord experiment(ExperimentId id);
  // Deletes the experiment and all of its runs.
  void delete_experiment(ExperimentId id);

  // --- Ingest (one run at a time per RunStore) ---
  // Starts the run's transaction. `initial` is the segment state before the first event (an
  // imported trace that begins after the allocator did); `start` is the series there.
  RunId begin_run(RunRecord record, const SegmentMap& initial = {}, SeriesPoint start = {});
  void append_events(RunId run, std::span<const TraceEvent> events, EventColumns columns = {});
  // The stacks that events' FrameStackIds refer to: stacks[i] is FrameStackId{i + 1}.
  void set_frame_stacks(RunId run, std::span<const std::vector<Frame>> stacks);
  void set_labels(RunId run, std::span<const RequestLabel> labels);  // labels[i] is LabelId{i}
  void add_oom_report(RunId run, std::uint64_t event_index, const nlohmann::json& report);
  // The environment fingerprint the run was recorded in (NAME.env.json, already checked with
  // analysis::parse_recorded_environment), in the run's ingest transaction when there is one.
  void set_recorded_environment(RunId run, const nlohmann::json& fingerprint,
                                const std::string& source_file);
  // Writes what is buffered, sets status, wall time and summary, and commits. Returns the run.
  // If any ingest call throws (disk full, I/O error), the run is rolled back and the store is
  // ready for the next begin_run().
  // `cancel` is polled once more right before the commit: a cancel seen there rolls the run
  // back and throws Cancelled; the commit itself is the point of no return.
  RunRecord finish_run(RunId run, RunStatus status, const nlohmann::json& summary = {},
                       double wall_seconds = 0, const CancelToken& cancel = {});
  // Rolls the run back as if begin_run() had never been called.
  void cancel_run(RunId run);
  bool ingesting() const { return ingest_ != nullptr; }

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
  // Removes the run and every row that belongs to it.
  void delete_run(RunId id);

  // --- Reading a run ---
  // Events [first, end) (clamped to the run's events).
  std::vector<TraceEvent> events(RunId run, std::uint64_t first, std::uint64_t end);
  // The events at `indices` (ascending, each below the run's event count), each chunk decoded
  // once.
  std::vector<TraceEvent> events_at(RunId run, std::span<const std::uint64_t> indices);
  // The OOM events and time range stored at ingest; nullopt for a run stored before they were
  // (schema < 8): scan its events instead.
  std::optional<EventOverview> event_overview(RunId run);
  // The series after each event in [first, end).
  std::vector<SeriesPoint> series(RunId run, std::uint64_t first, std::uint64_t end);
  std::vector<LabelId> labels_of_events(RunId run, std::uint64_t first, std::uint64_t end);
  std::vector<RunLabel> labels(RunId run);
  std::vector<Frame> frame_stack(RunId run, FrameStackId stack);
  // Every stack of the run: result[i] is FrameStackId{i + 1} (as set_frame_stacks took them).
  std::vector<std::vector<Frame>> frame_stacks(RunId run);
  std::vector<OomReport> oom_reports(RunId run);
  // The run's recorded environment fingerprint; nullopt when it was stored without one.
  std::optional<nlohmann::json> recorded_environment(RunId run);
  // At most `buckets` peak-preserving buckets over events [first, end).
  std::vector<TimelineBucket> timeline(RunId run, std::uint64_t first, std::uint64_t end,
                                       std::size_t buckets);
  // The same over the whole run.
  std::vector<TimelineBucket> timeline(RunId run, std::size_t buckets);
  // At most `buckets` buckets of memory by category over events [first, end): the GUI's stacked
  // parameter / gradient / optimizer_state / activation / temporary plot. Allocations without a
  // label (and every allocation of an unlabelled run) count as Category::unknown. Bucketed like
  // timeline(), from the category pyramid stored at ingest; a run stored before the pyramid
  // existed (schema < 8) is replayed from its first event. `cancel` is polled per chunk or row
  // read; `progress` is told ("categories", done, total) as the pyramid's pieces are read (a run
  // replayed: its events), ending at total of total when the buckets are complete
  // (kCategoryTimelineStages).
  std::vector<CategoryBucket> category_timeline(RunId run, std::uint64_t first, std::uint64_t end,
                                                std::size_t buckets, const CancelToken& cancel = {},
                                                const Progress& progress = {});
  // The index of the first event at or after `time_us` (event_count when none): maps a time
  // axis onto the event axis that timeline() takes.
  std::uint64_t event_at_time(RunId run, std::int64_t time_us);
  // The segment map after the first `event_index` events (clamped to the run's events).
  SegmentStateAt segment_state(RunId run, std::uint64_t event_index);

  // --- Comparisons and reports ---
  ComparisonId save_comparison(const std::string& name, std::span<const RunId> runs,
                               const nlohmann::json& result);
  std::vector<ComparisonRecord> list_comparisons();
  ReportId save_report(std::optional<ComparisonId> comparison, const std::string& title,
                       const std::string& format, const std::string& content);
  std::vector<ReportRecord> list_reports();
  ReportRecord report(ReportId id);

  // Rebuilds the file to its smallest size (not inside an ingest).
  void vacuum();

 private:
  struct Ingest;
  Ingest& ingest_for(RunId run);
  // Runs `work`; if it throws, the ingest is rolled back before the exception propagates.
  template <typename Work>
  void abort_on_failure(Work&& work);
  void append_to(Ingest& ingest, std::span<const TraceEvent> events, EventColumns columns);
  void commit_ingest(Ingest& ingest, RunStatus status, const nlohmann::json& summary,
                     double wall_seconds, const CancelToken& cancel);
  void write_frame_stacks(RunId run, std::span<const std::vector<Frame>> stacks);
  void write_labels(RunId run, std::span<const RequestLabel> labels);
  // Memory by category (run_store_categories.cpp).
  void track_categories(Ingest& ingest, const TraceEvent& event, LabelId label);
  void flush_category_chunk(Ingest& ingest);
  void write_category_rows(RunId run, const std::vector<CategoryPyramidBuilder::Row>& rows);
  std::vector<CategoryBucket> category_singles(RunId run, std::uint64_t first, std::uint64_t end,
                                               const CancelToken& cancel);
  std::vector<CategoryBucket> category_level(RunId run, int level, std::uint64_t first_bucket,
                                             std::uint64_t end_bucket, const CancelToken& cancel);
  std::vector<CategoryBucket> category_timeline_by_replay(RunId run, std::uint64_t first,
                                                          std::uint64_t end, std::size_t buckets,
                                                          const CancelToken& cancel,
                                                          const Progress& progress);
  void flush_chunk(Ingest& ingest);
  void write_timeline_rows(RunId run, const std::vector<TimelineBuilder::Row>& rows);
  EventChunk load_chunk(RunId run, std::uint64_t chunk_first);
  std::vector<EventChunk> load_chunks(RunId run, std::uint64_t first, std::uint64_t end);
  void require_run(RunId id);

  std::unique_ptr<Database> db_;
  std::unique_ptr<Ingest> ingest_;
};

}  // namespace fragscope::storage
