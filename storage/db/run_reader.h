#pragma once
// RunReader: one stored run's events and what ingest derived from them (RunWriter,
// run_writer.h): the series after every event, labels, stacks, OOM reports, the recorded
// environment, peak-preserving timelines and memory by category from their stored pyramids, and
// the segment map at any event from the nearest keyframe. Reading never replays a run from its
// first event, except category_timeline() for a run without category rows: one stored before the
// category pyramid existed, or one without labels (whose callers do not ask).
//
// A reader works on a Database it does not own; readers in other connections on the same file
// keep working while a run is written (WAL). Use it from one thread at a time, as its Database.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/cancel.h"
#include "engine/core/frame.h"
#include "engine/core/progress.h"
#include "engine/core/request.h"
#include "engine/core/trace.h"
#include "storage/db/category_pyramid.h"
#include "storage/db/database.h"
#include "storage/db/event_chunk.h"
#include "storage/db/run_catalog.h"
#include "storage/db/segment_map.h"
#include "storage/db/timeline.h"

namespace fragscope::storage {

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

// What opening a run shows before any event is decoded, stored at ingest (schema 8).
struct EventOverview {
  std::vector<std::uint64_t> oom_events;  // indices of the trace's TraceAction::oom events
  std::int64_t first_time_us = 0;         // the first and last event times; 0 = no times
  std::int64_t last_time_us = 0;
};

// The one stage RunReader::category_timeline reports, for fraction_progress.
inline constexpr ProgressStage kCategoryTimelineStages[] = {{"categories", 1}};

class RunReader {
 public:
  explicit RunReader(Database& db) : db_(db) {}

  // A run's events read forward, a window at a time, each chunk inflated and decoded once (events()
  // decodes the chunks of every window it is asked for from their start). Holds one chunk's
  // inflated columns. Made by event_stream(); lives no longer than its reader.
  class EventStream {
   public:
    // Appends the next events, `count` of them or those left, to `out`; returns how many.
    std::size_t read(std::size_t count, std::vector<TraceEvent>& out);
    // The index of the next event read.
    std::uint64_t position() const { return next_; }

   private:
    friend class RunReader;
    EventStream(RunReader& reader, RunId run, std::uint64_t first);

    RunReader& reader_;
    RunId run_;
    std::uint64_t next_ = 0;
    std::uint64_t end_ = 0;
    std::optional<ChunkReader> chunk_;  // the chunk holding event next_, read up to it
  };
  // The events from `first` on (clamped to the run's events).
  EventStream event_stream(RunId run, std::uint64_t first = 0);

  // The file it reads, for messages that say where a run came from.
  const std::string& database_path() const { return db_.path(); }

  // Events [first, end) (clamped to the run's events). Every read of an unknown run is a
  // DatabaseError naming it.
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
  // existed (schema < 8), or one without labels, is replayed from its first event. `cancel` is
  // polled per chunk or row read; `progress` is told ("categories", done, total) as the pyramid's
  // pieces are read (a run replayed: its events), ending at total of total when the buckets are
  // complete (kCategoryTimelineStages).
  std::vector<CategoryBucket> category_timeline(RunId run, std::uint64_t first, std::uint64_t end,
                                                std::size_t buckets, const CancelToken& cancel = {},
                                                const Progress& progress = {});
  // The index of the first event at or after `time_us` (event_count when none): maps a time
  // axis onto the event axis that timeline() takes.
  std::uint64_t event_at_time(RunId run, std::int64_t time_us);
  // The segment map after the first `event_index` events (clamped to the run's events).
  SegmentStateAt segment_state(RunId run, std::uint64_t event_index);

 private:
  // The run's stored event count (RunRecord::event_count) without reading its record.
  std::uint64_t event_count(RunId run);
  // The stored chunk starting at event `chunk_first`, stepped to its row.
  Statement chunk_query(RunId run, std::uint64_t chunk_first);
  EventChunk load_chunk(RunId run, std::uint64_t chunk_first);
  // A reader of the chunk starting at event `chunk_first`.
  ChunkReader read_chunk(RunId run, std::uint64_t chunk_first);
  std::vector<EventChunk> load_chunks(RunId run, std::uint64_t first, std::uint64_t end);
  // Memory by category (run_categories.cpp).
  std::vector<CategoryBucket> category_singles(RunId run, std::uint64_t first, std::uint64_t end,
                                               const CancelToken& cancel);
  std::vector<CategoryBucket> category_level(RunId run, int level, std::uint64_t first_bucket,
                                             std::uint64_t end_bucket, const CancelToken& cancel);
  std::vector<CategoryBucket> category_timeline_by_replay(RunId run, std::uint64_t first,
                                                          std::uint64_t end, std::size_t buckets,
                                                          const CancelToken& cancel,
                                                          const Progress& progress);

  Database& db_;
};

}  // namespace fragscope::storage
