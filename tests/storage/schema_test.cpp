#include "storage/db/schema.h"

#include <gtest/gtest.h>

#include "storage/db/run_store.h"
#include "storage_test_util.h"

namespace fragscope::storage {
namespace {

using test::TempDir;

TEST(Schema, NewDatabaseIsCreatedAtTheLatestVersionInWalMode) {
  TempDir dir;
  const std::string path = dir.file("new.db");
  { RunStore store(path); }
  Database db(path);
  EXPECT_EQ(schema_version(db), latest_schema_version());
  EXPECT_EQ(db.query_int("PRAGMA application_id"), kApplicationId);
  auto mode = db.prepare("PRAGMA journal_mode");
  ASSERT_TRUE(mode.step());
  EXPECT_EQ(mode.column_text(0), "wal");
  EXPECT_EQ(db.query_int("PRAGMA page_size"), kNewFilePageSize);
  auto store = open_store_database(path);
  EXPECT_EQ(store->query_int("PRAGMA foreign_keys"), 1);
}

// Builds a database at every earlier schema version, with data that version could hold, and
// checks that opening it brings it forward without losing that data.
TEST(Schema, MigratesFromEveryEarlierVersion) {
  for (int version = 0; version < latest_schema_version(); ++version) {
    SCOPED_TRACE("from version " + std::to_string(version));
    TempDir dir;
    const std::string path = dir.file("old.db");
    std::int64_t page_size = 0;  // SQLite's default, as the file was made before this build
    {
      Database db(path);
      page_size = db.query_int("PRAGMA page_size");
      migrate_to(db, version);
      EXPECT_EQ(schema_version(db), version);
      if (version >= 1) {
        db.exec(
            "INSERT INTO experiments(id, name, definition, created_at) "
            "VALUES (1, 'old', '{}', '2026-01-01T00:00:00Z')");
        db.exec(
            "INSERT INTO runs(id, experiment_id, name, source, status, created_at, summary) "
            "VALUES (1, 1, 'old run', 'simulated', 'ok', '2026-01-01T00:00:00Z', '{}')");
        // The allocator config column was alloc_config before version 8.
        db.exec(std::string("UPDATE runs SET ") + (version < 8 ? "alloc_config" : "alloc_conf") +
                " = 'expandable_segments:True'");
      }
    }
    RunStore store(path);
    EXPECT_EQ(schema_version(store.database()), latest_schema_version());
    // A file made before kNewFilePageSize keeps its pages, except the empty one of version 0,
    // which the store creates.
    EXPECT_EQ(store.database().query_int("PRAGMA page_size"),
              version == 0 ? kNewFilePageSize : page_size);
    if (version >= 1) {
      ASSERT_EQ(store.run_count(), 1);
      EXPECT_EQ(store.run(RunId{1}).name, "old run");
      EXPECT_EQ(store.run(RunId{1}).alloc_conf, "expandable_segments:True");
      EXPECT_EQ(store.experiment(ExperimentId{1}).name, "old");
    }
    // Everything of the latest schema works on the migrated file.
    const RunId id = store.begin_run(RunRecord{});
    store.append_events(id, test::synthetic_trace(1000));
    store.add_oom_report(id, 3, {{"x", 1}});
    store.finish_run(id, RunStatus::ok);
    const RunId both[] = {id};
    store.save_comparison("c", both, {});
    EXPECT_EQ(store.timeline(id, 10).size(), 10u);
  }
}

std::string journal_mode(Database& db) {
  auto mode = db.prepare("PRAGMA journal_mode");
  return mode.step() ? mode.column_text(0) : std::string();
}

// A store made with SQLite's default 4 KiB pages gets kNewFilePageSize's from vacuum, once no
// other connection has it open, and stays in WAL mode with its runs as they were.
TEST(Schema, VacuumGivesAStoreOfSmallerPagesTheNewSize) {
  TempDir dir;
  const std::string path = dir.file("old-pages.db");
  {
    Database db(path);
    db.exec("PRAGMA page_size = 4096");
    migrate_to(db, latest_schema_version());
  }
  std::vector<TimelineBucket> before;
  RunId id;
  {
    RunStore store(path);
    ASSERT_EQ(store.database().query_int("PRAGMA page_size"), 4096);
    id = store.begin_run(RunRecord{});
    store.append_events(id, test::synthetic_trace(20'000));
    store.finish_run(id, RunStatus::ok);
    before = store.timeline(id, 64);
    {
      Database reader(path, OpenMode::read_only);
      ASSERT_EQ(reader.query_int("SELECT count(*) FROM runs"), 1);
      const auto kept = store.vacuum();  // does not wait for the reader: keeps the pages
      EXPECT_EQ(kept.page_size_before, 4096);
      EXPECT_EQ(kept.page_size_after, 4096);
      EXPECT_NE(kept.pages_kept_because.find("another program is using the file"),
                std::string::npos);
      EXPECT_TRUE(kept.in_wal_mode);
      EXPECT_EQ(store.database().query_int("PRAGMA page_size"), 4096);
      EXPECT_EQ(journal_mode(store.database()), "wal");
    }
    const auto resized = store.vacuum();
    EXPECT_EQ(resized.page_size_after, kNewFilePageSize);
    EXPECT_EQ(resized.pages_kept_because, "");
    EXPECT_TRUE(resized.in_wal_mode);
    EXPECT_EQ(store.database().query_int("PRAGMA synchronous"), 1) << "NORMAL again";
    EXPECT_EQ(store.database().query_int("PRAGMA page_size"), kNewFilePageSize);
    EXPECT_EQ(journal_mode(store.database()), "wal");
    EXPECT_EQ(store.timeline(id, 64), before);
  }
  RunStore reopened(path);
  EXPECT_EQ(reopened.database().query_int("PRAGMA page_size"), kNewFilePageSize);
  auto check = reopened.database().prepare("PRAGMA integrity_check");
  ASSERT_TRUE(check.step());
  EXPECT_EQ(check.column_text(0), "ok");
  EXPECT_EQ(reopened.timeline(id, 64), before);
}

TEST(Schema, NewerDatabaseIsRefusedAndNotModified) {
  TempDir dir;
  const std::string path = dir.file("future.db");
  {
    RunStore store(path);
    store.database().exec("PRAGMA user_version = " + std::to_string(latest_schema_version() + 1));
  }
  const auto before = test::read_file(path);
  try {
    RunStore store(path);
    FAIL() << "expected SchemaTooNewError";
  } catch (const SchemaTooNewError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos);
    EXPECT_NE(message.find("newer FragScope"), std::string::npos);
    EXPECT_NE(message.find("not modified"), std::string::npos);
  }
  EXPECT_EQ(test::read_file(path), before);
}

TEST(Schema, ForeignSqliteDatabaseIsRefusedAndNotModified) {
  TempDir dir;
  const std::string path = dir.file("other.db");
  {
    Database db(path);
    db.exec("CREATE TABLE contacts(name TEXT)");
  }
  const auto before = test::read_file(path);
  try {
    RunStore store(path);
    FAIL() << "expected DatabaseError";
  } catch (const DatabaseError& e) {
    EXPECT_NE(std::string(e.what()).find("not FragScope's"), std::string::npos);
  }
  EXPECT_EQ(test::read_file(path), before);
}

TEST(Schema, EachMigrationIsAtomic) {
  // A database stopped between migrations is at a whole version, never in between.
  TempDir dir;
  const std::string path = dir.file("partial.db");
  {
    Database db(path);
    migrate_to(db, 1);
  }
  Database db(path);
  EXPECT_EQ(schema_version(db), 1);
  EXPECT_EQ(db.query_int("SELECT count(*) FROM sqlite_schema WHERE name = 'timeline_levels'"), 0);
}

}  // namespace
}  // namespace fragscope::storage
