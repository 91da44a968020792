// The three concerns of a store as types of their own (RunCatalog, RunWriter, RunReader), each
// over a connection it does not own: a writer stores a run on one connection while a reader on
// another reads runs already there, and the catalog on the writer's connection refuses what would
// break the run being written.
#include <gtest/gtest.h>

#include <memory>

#include "storage/db/run_catalog.h"
#include "storage/db/run_reader.h"
#include "storage/db/run_writer.h"
#include "storage/db/schema.h"
#include "storage_test_util.h"

namespace fragscope::storage {
namespace {

TEST(RunConcerns, EachWorksOnAConnectionItDoesNotOwn) {
  test::TempDir dir;
  const std::string path = dir.file("runs.db");
  const std::unique_ptr<Database> writing = open_store_database(path);
  RunWriter writer(*writing);
  RunCatalog catalog(*writing);
  const auto events = test::synthetic_trace(2 * kEventsPerChunk + 17);
  const RunId first = writer.begin_run(test::record_named("first"));
  writer.append_events(first, events);
  const RunRecord stored = writer.finish_run(first, RunStatus::ok);
  EXPECT_EQ(stored.event_count, events.size());
  EXPECT_EQ(catalog.run(first), stored);

  // A second run in flight on the writer's connection: a reader on its own read-only connection
  // sees the first run whole and not the second; the catalog beside the writer will not delete
  // or vacuum under it.
  const RunId second = writer.begin_run(test::record_named("second"));
  writer.append_events(second, std::span(events).first(100));
  {
    const std::unique_ptr<Database> reading = open_store_database(path, OpenMode::read_only);
    RunReader reader(*reading);
    EXPECT_EQ(reader.events(first, 0, events.size()), events);
    EXPECT_EQ(reader.segment_state(first, events.size()).state.serialize(), [&] {
      SegmentMap map;
      for (const TraceEvent& event : events)
        map.apply(event);
      return map.serialize();
    }());
    const auto whole = reader.timeline(first, 1);
    ASSERT_EQ(whole.size(), 1u);
    EXPECT_EQ(whole.front().max.reserved, stored.summary.at("peaks").at("reserved"));
    EXPECT_THROW(reader.events(second, 0, 1), DatabaseError);  // not committed: absent
    EXPECT_EQ(RunCatalog(*reading).run_count(), 1);
  }
  EXPECT_THROW(catalog.delete_run(first), DatabaseError);
  EXPECT_THROW(catalog.vacuum(), DatabaseError);
  writer.finish_run(second, RunStatus::ok);
  catalog.delete_run(first);
  EXPECT_EQ(catalog.run_count(), 1);
  EXPECT_EQ(RunReader(*writing).events(second, 0, 1000).size(), 100u);
}

// A writer destroyed with a run in flight rolls it back: the catalog never lists it.
TEST(RunConcerns, AWriterGoneMidRunLeavesNoRun) {
  const std::unique_ptr<Database> db = open_store_database(":memory:");
  {
    RunWriter writer(*db);
    const RunId run = writer.begin_run(test::record_named("lost"));
    writer.append_events(run, test::synthetic_trace(500));
  }
  EXPECT_EQ(RunCatalog(*db).run_count(), 0);
  EXPECT_FALSE(db->in_transaction());
}

}  // namespace
}  // namespace fragscope::storage
