// What opening a run shows before any event is decoded (RunStore::event_overview): stored at
// ingest, it must be what a scan of the run's events finds.
#include <gtest/gtest.h>

#include "engine/snapshot/snapshot.h"
#include "storage/db/run_store.h"
#include "storage/db/snapshot_import.h"
#include "storage_test_util.h"

namespace fragscope::storage {
namespace {

EventOverview scanned(RunStore& store, RunId run) {
  EventOverview out;
  const auto events = store.events(run, 0, store.run(run).event_count);
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i].action == TraceAction::oom)
      out.oom_events.push_back(i);
    if (events[i].time_us != 0) {
      if (out.first_time_us == 0)
        out.first_time_us = events[i].time_us;
      out.last_time_us = events[i].time_us;
    }
  }
  return out;
}

TEST(EventOverview, StoredAtIngestIsWhatAScanOfTheEventsFinds) {
  RunStore store(":memory:");
  for (const char* name : {"gpt_oom_cap", "gpt_fixedlen_default"}) {
    SCOPED_TRACE(name);
    const std::string path = test::fixture(name, ".pickle.gz");
    const RunId run =
        import_snapshot(store, snapshot::read_snapshot(path), test::import_options(name)).run;
    const std::optional<EventOverview> stored = store.event_overview(run);
    ASSERT_TRUE(stored.has_value());
    const EventOverview expected = scanned(store, run);
    EXPECT_EQ(stored->oom_events, expected.oom_events);
    EXPECT_EQ(stored->first_time_us, expected.first_time_us);
    EXPECT_EQ(stored->last_time_us, expected.last_time_us);
    EXPECT_NE(stored->first_time_us, 0);
    const auto ooms = store.events_at(run, stored->oom_events);
    ASSERT_EQ(ooms.size(), stored->oom_events.size());
    for (const TraceEvent& event : ooms)
      EXPECT_EQ(event.action, TraceAction::oom);
  }
  // The OOM run has OOM events to find (else the comparison above proves little).
  const RunId oom = store.list_runs().front().id;
  EXPECT_FALSE(store.event_overview(oom)->oom_events.empty());
}

TEST(EventOverview, ARunStoredBeforeItHasNoneAndIsScanned) {
  RunStore store(":memory:");
  RunRecord record;
  record.name = "old";
  const RunId run = store.begin_run(record);
  std::vector<TraceEvent> events(3);
  events[0] = {TraceAction::segment_alloc, 0x1000, 2 << 20, StreamId{}, 10};
  events[1] = {TraceAction::oom, 0, 4 << 20, StreamId{}, 0};
  events[2] = {TraceAction::oom, 0, 8 << 20, StreamId{}, 30};
  store.append_events(run, events);
  store.finish_run(run, RunStatus::oom);
  const std::optional<EventOverview> stored = store.event_overview(run);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->oom_events, (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(stored->first_time_us, 10);
  EXPECT_EQ(stored->last_time_us, 30);
  // What a database of schema 8 holds: no overview in the summary.
  nlohmann::json summary = store.run(run).summary;
  summary.erase("overview");
  store.update_summary(run, summary);
  EXPECT_FALSE(store.event_overview(run).has_value());
  const std::uint64_t beyond[] = {3};
  EXPECT_THROW(store.events_at(run, beyond), DatabaseError);
}

}  // namespace
}  // namespace fragscope::storage
