#pragma once
// What the pages show, as plain values loaded off the GUI thread. Each loader opens its own
// read-only RunStore on the database file (a RunStore is one connection, one thread) and is
// meant to run inside a JobTracker job.
#include <QMetaType>
#include <QString>
#include <cstdint>
#include <optional>
#include <vector>

#include "engine/analysis/pool_usage.h"
#include "engine/core/trace.h"
#include "gui/metatypes.h"
#include "gui/segment_layout.h"
#include "storage/db/run_store.h"

namespace fragscope::gui {

class JobContext;

// Peak-preserving buckets over events [first, end) of one run.
struct TimelineSlice {
  storage::RunId run{};
  std::uint64_t first = 0;
  std::uint64_t end = 0;
  std::vector<storage::TimelineBucket> buckets;
};

// Memory by allocation category over events [first, end) of one run, for the timeline's stack.
// `labelled` is false for a run without labels (an imported snapshot): it has no categories to
// show, and `buckets` stays empty.
struct CategorySlice {
  storage::RunId run{};
  std::uint64_t first = 0;
  std::uint64_t end = 0;
  bool labelled = false;
  std::vector<storage::CategoryBucket> buckets;
};

// The run as a whole: its record, its length and where it ran out of memory.
struct RunOverview {
  storage::RunRecord record;
  std::vector<std::uint64_t> oomEvents;  // indices of TraceAction::oom events
  std::vector<TraceEvent> oomDetails;    // the same events
  std::int64_t firstTimeUs = 0;          // 0 = the trace has no times
  std::int64_t lastTimeUs = 0;
  // The cursor position (events applied) where allocated memory first reaches its peak: where
  // the timeline opens for a run without OOM (the last event usually has everything freed).
  std::uint64_t peakCursor = 0;
};

// The segment map after the first `eventIndex` events, and the event at `eventIndex` (the next
// one to happen), which the map explains when it is an OOM.
struct SegmentSnapshotAt {
  storage::RunId run{};
  std::uint64_t eventIndex = 0;
  std::uint64_t eventCount = 0;
  storage::SegmentMap state;
  std::optional<TraceEvent> nextEvent;
  // The state classified for drawing, computed with the load so the GUI thread only lays out.
  std::vector<SegmentView> views;
  SegmentMapSummary summary;
  // Default vs private pools (gui/pool_overview.h); empty when the run has no private pool.
  std::vector<analysis::PoolUsage> pools;
  // Each view's pool (parallel to `views`); empty when the run has no private pool.
  std::vector<MempoolId> segmentPools;
};

TimelineSlice loadTimeline(const QString& databasePath, storage::RunId run, std::uint64_t first,
                           std::uint64_t end, std::size_t buckets);
// Reads the run's labels first and only computes the buckets when there are any (a query of the
// category pyramid; a run stored before it is replayed from event 0). A superseded `job` stops
// the query at its next chunk.
CategorySlice loadCategoryTimeline(const QString& databasePath, storage::RunId run,
                                   std::uint64_t first, std::uint64_t end, std::size_t buckets,
                                   const JobContext* job = nullptr);
// The cursor position (events applied) at which allocated memory first reaches its maximum,
// found by narrowing the store's peak-preserving buckets (a few queries, not a scan).
std::uint64_t findPeakAllocatedCursor(storage::RunReader& store, storage::RunId run,
                                      std::uint64_t eventCount);
// Scans the run's events once for OOMs, in chunks, stopping early when cancelled.
RunOverview loadOverview(const QString& databasePath, storage::RunId run,
                         const JobContext* job = nullptr);
SegmentSnapshotAt loadSegmentSnapshot(const QString& databasePath, storage::RunId run,
                                      std::uint64_t eventIndex);

// Opens the store read-only when the file exists (a reader beside the GUI's writer), else
// creates it.
std::unique_ptr<storage::RunStore> openReader(const QString& databasePath);

}  // namespace fragscope::gui

Q_DECLARE_METATYPE(fragscope::gui::TimelineSlice)
Q_DECLARE_METATYPE(fragscope::gui::RunOverview)
Q_DECLARE_METATYPE(fragscope::gui::CategorySlice)
Q_DECLARE_METATYPE(fragscope::gui::SegmentSnapshotAt)
