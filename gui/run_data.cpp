#include "gui/run_data.h"

#include <QFileInfo>
#include <algorithm>

#include "engine/snapshot/segment_state.h"
#include "gui/job_tracker.h"
#include "gui/pool_overview.h"
#include "storage/db/stats_at.h"

namespace fragscope::gui {

std::unique_ptr<storage::RunStore> openReader(const QString& databasePath) {
  const bool exists = QFileInfo::exists(databasePath);
  return std::make_unique<storage::RunStore>(
      databasePath.toStdString(),
      exists ? storage::OpenMode::read_only : storage::OpenMode::read_write_create);
}

TimelineSlice loadTimeline(const QString& databasePath, storage::RunId run, std::uint64_t first,
                           std::uint64_t end, std::size_t buckets) {
  auto store = openReader(databasePath);
  TimelineSlice slice;
  slice.run = run;
  slice.first = first;
  slice.end = end;
  slice.buckets = store->timeline(run, first, end, std::max<std::size_t>(buckets, 1));
  return slice;
}

CategorySlice loadCategoryTimeline(const QString& databasePath, storage::RunId run,
                                   std::uint64_t first, std::uint64_t end, std::size_t buckets,
                                   const JobContext* job) {
  auto store = openReader(databasePath);
  CategorySlice slice;
  slice.run = run;
  slice.first = first;
  slice.end = end;
  slice.labelled = !store->labels(run).empty();
  if (slice.labelled)
    slice.buckets = store->category_timeline(run, first, end, std::max<std::size_t>(buckets, 1),
                                             job ? job->workControl().cancel : CancelToken{});
  return slice;
}

std::uint64_t findPeakAllocatedCursor(storage::RunReader& store, storage::RunId run,
                                      std::uint64_t eventCount) {
  constexpr std::size_t kBuckets = 512;
  std::uint64_t first = 0;
  std::uint64_t end = eventCount;
  // Narrow down with the pyramid, then read the last few thousand events' series exactly.
  constexpr std::uint64_t kExact = 4096;
  while (end - first > kExact) {
    const auto buckets = store.timeline(run, first, end, kBuckets);
    if (buckets.empty())
      break;
    const auto peak =
        std::max_element(buckets.begin(), buckets.end(),
                         [](const storage::TimelineBucket& a, const storage::TimelineBucket& b) {
                           return a.max.allocated < b.max.allocated;
                         });
    // No narrower bucket (the store's finest level): stop at its first event.
    if (peak->end_event - peak->first_event >= end - first)
      break;
    first = peak->first_event;
    end = peak->end_event;
  }
  if (eventCount == 0)
    return 0;
  const auto series = store.series(run, first, end);
  const auto peak =
      std::max_element(series.begin(), series.end(),
                       [](const storage::SeriesPoint& a, const storage::SeriesPoint& b) {
                         return a.allocated < b.allocated;
                       });
  if (peak != series.end())
    first += static_cast<std::uint64_t>(peak - series.begin());
  // The state after the peak event.
  return std::min(first + 1, eventCount);
}

RunOverview loadOverview(const QString& databasePath, storage::RunId run, const JobContext* job) {
  auto store = openReader(databasePath);
  RunOverview overview;
  overview.record = store->run(run);
  const std::uint64_t count = overview.record.event_count;
  if (std::optional<storage::EventOverview> stored = store->event_overview(run)) {
    // Stored at ingest: opening a long run reads a few rows, not every chunk.
    overview.oomEvents = std::move(stored->oom_events);
    overview.oomDetails = store->events_at(run, overview.oomEvents);
    overview.firstTimeUs = stored->first_time_us;
    overview.lastTimeUs = stored->last_time_us;
    overview.peakCursor = findPeakAllocatedCursor(*store, run, count);
    return overview;
  }
  // A run stored before the overview was (schema < 8): its oom events are found by one scan.
  constexpr std::uint64_t kStep = storage::kEventsPerChunk;
  for (std::uint64_t first = 0; first < count; first += kStep) {
    if (job && job->cancelled())
      break;
    const auto events = store->events(run, first, std::min(count, first + kStep));
    for (std::size_t i = 0; i < events.size(); ++i) {
      const TraceEvent& event = events[i];
      if (event.time_us != 0) {
        if (overview.firstTimeUs == 0)
          overview.firstTimeUs = event.time_us;
        overview.lastTimeUs = event.time_us;
      }
      if (event.action == TraceAction::oom) {
        overview.oomEvents.push_back(first + i);
        overview.oomDetails.push_back(event);
      }
    }
    if (job)
      job->progress(static_cast<double>(first + kStep) / static_cast<double>(count));
  }
  overview.peakCursor = findPeakAllocatedCursor(*store, run, count);
  return overview;
}

SegmentSnapshotAt loadSegmentSnapshot(const QString& databasePath, storage::RunId run,
                                      std::uint64_t eventIndex) {
  auto store = openReader(databasePath);
  SegmentSnapshotAt snapshot;
  snapshot.run = run;
  const storage::RunRecord record = store->run(run);
  snapshot.eventCount = record.event_count;
  snapshot.eventIndex = std::min(eventIndex, snapshot.eventCount);
  snapshot.state = store->segment_state(run, snapshot.eventIndex).state;
  const auto next = store->events(run, snapshot.eventIndex, snapshot.eventIndex + 1);
  if (!next.empty())
    snapshot.nextEvent = next.front();
  snapshot.views = segmentViews(snapshot.state);
  // The free figures by the block sizes the run's allocator config gives its live requests
  // (a config that does not parse leaves the gaps between requests counted as free).
  std::optional<fragscope::snapshot::LayoutRules> rules;
  try {
    rules =
        fragscope::snapshot::LayoutRules::from_config(storage::allocator_config_of(record).config);
  } catch (const std::exception&) {
    rules.reset();
  }
  snapshot.summary = summarize(snapshot.views, rules ? &*rules : nullptr);
  snapshot.pools = poolsAt(record.summary, snapshot.views);
  snapshot.segmentPools = segmentPools(record.summary, snapshot.views);
  return snapshot;
}

}  // namespace fragscope::gui
