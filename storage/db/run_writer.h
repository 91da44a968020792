#pragma once
// RunWriter: storing a run. Ingest is one transaction per run: begin_run(), append_events() any
// number of times, finish_run(). As events come it writes them in compressed chunks (compressed
// on a worker thread), with segment keyframes, the peak-preserving timeline pyramid, memory by
// category (chunks and pyramid, so a zoom is a query, not a replay) and what opening the run
// shows first (EventOverview). Until finish_run() commits, no other connection sees the run, and
// if the process dies (or cancel_run() is called, or the writer is destroyed) the run is absent.
//
// A writer works on a Database it does not own and writes one run at a time; use it from one
// thread at a time, as its Database.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/cancel.h"
#include "engine/core/frame.h"
#include "engine/core/request.h"
#include "engine/core/trace.h"
#include "storage/db/category_pyramid.h"
#include "storage/db/database.h"
#include "storage/db/run_catalog.h"
#include "storage/db/segment_map.h"
#include "storage/db/timeline.h"

namespace fragscope::storage {

// Optional per-event columns that go with a batch of events.
struct EventColumns {
  // The series after each event, when the producer knows them exactly (the allocator model
  // knows block sizes); empty = derived from the trace (derive_series()).
  std::span<const SeriesPoint> series;
  // The label of each event (0 = none); empty = no labels.
  std::span<const LabelId> labels;
};

class RunWriter {
 public:
  explicit RunWriter(Database& db);
  // A run still being written is rolled back.
  ~RunWriter();
  RunWriter(const RunWriter&) = delete;
  RunWriter& operator=(const RunWriter&) = delete;

  // Starts the run's transaction. `initial` is the segment state before the first event (an
  // imported trace that begins after the allocator did); `start` is the series there.
  RunId begin_run(RunRecord record, const SegmentMap& initial = {}, SeriesPoint start = {});
  void append_events(RunId run, std::span<const TraceEvent> events, EventColumns columns = {});
  // The stacks that events' FrameStackIds refer to: stacks[i] is FrameStackId{i + 1}.
  void set_frame_stacks(RunId run, std::span<const std::vector<Frame>> stacks);
  // labels[i] is LabelId{i}. Before the run's first event (else a DatabaseError): a run given a
  // table stores its memory by category as events come.
  void set_labels(RunId run, std::span<const RequestLabel> labels);
  // In the run's ingest transaction when it is being written, else in a transaction of its own.
  void add_oom_report(RunId run, std::uint64_t event_index, const nlohmann::json& report);
  // The environment fingerprint the run was recorded in (NAME.env.json, already checked with
  // analysis::parse_recorded_environment), in the run's ingest transaction when there is one.
  void set_recorded_environment(RunId run, const nlohmann::json& fingerprint,
                                const std::string& source_file);
  // Writes what is buffered, sets status, wall time and summary, and commits. Returns the run.
  // If any ingest call throws (disk full, I/O error), the run is rolled back and the writer is
  // ready for the next begin_run().
  // `cancel` is polled once more right before the commit: a cancel seen there rolls the run
  // back and throws Cancelled; the commit itself is the point of no return.
  RunRecord finish_run(RunId run, RunStatus status, const nlohmann::json& summary = {},
                       double wall_seconds = 0, const CancelToken& cancel = {});
  // Rolls the run back as if begin_run() had never been called.
  void cancel_run(RunId run);
  bool ingesting() const { return ingest_ != nullptr; }

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
  // Memory by category (run_categories.cpp).
  // After event `index` is buffered.
  void track_categories(Ingest& ingest, std::uint64_t index, const TraceEvent& event,
                        LabelId label);
  void write_category_rows(RunId run, const std::vector<CategoryPyramidBuilder::Row>& rows);
  // Hands the part being filled to the worker (Ingest::kEventsPerPart); `ends_chunk`: the chunk
  // it ends is written once the worker is done.
  void flush_part(Ingest& ingest, bool ends_chunk);
  void write_timeline_rows(RunId run, const std::vector<TimelineBuilder::Row>& rows);

  Database& db_;
  std::unique_ptr<Ingest> ingest_;
};

}  // namespace fragscope::storage
