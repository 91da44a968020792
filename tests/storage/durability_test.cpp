// Databases FragScope did not write, or that a crash left behind: refused before anything is
// written, with a message that says what is wrong and what to do. Statements never leak.
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>

#include "storage/db/run_store.h"
#include "storage/db/schema.h"
#include "storage_test_util.h"

namespace fragscope::storage {
namespace {

using test::synthetic_trace;
using test::TempDir;
using ::testing::HasSubstr;

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const DatabaseError& e) {
    return e.what();
  }
  return "(no error)";
}

RunId store_run(RunStore& store, std::size_t events, std::string name) {
  RunRecord record;
  record.name = std::move(name);
  const RunId id = store.begin_run(record);
  store.append_events(id, synthetic_trace(events, 9));
  store.finish_run(id, RunStatus::ok);
  return id;
}

TEST(Durability, NegativeUserVersionIsRefusedAndUntouched) {
  TempDir dir;
  const std::string path = dir.file("negative.db");
  {
    Database db(path);
    db.exec("CREATE TABLE mine(x); PRAGMA user_version = -1");
  }
  const std::string before = test::read_file(path);
  const std::string message = error_of([&] { RunStore store(path); });
  EXPECT_THAT(message, HasSubstr(path + ": schema version -1 is not one FragScope writes"));
  EXPECT_EQ(test::read_file(path), before);
  // Also without any table (the foreign-database check must not be skipped either way).
  {
    Database db(dir.file("empty-negative.db"));
    db.exec("PRAGMA user_version = -7");
  }
  EXPECT_THAT(error_of([&] { RunStore store(dir.file("empty-negative.db")); }),
              HasSubstr("schema version -7"));
  Database db(":memory:");
  db.exec("PRAGMA user_version = -1");
  EXPECT_THAT(error_of([&] { migrate_to(db, latest_schema_version()); }),
              HasSubstr("cannot migrate from schema version -1"));
}

TEST(Durability, RefusedSecondStatementIsFinalized) {
  Database db(":memory:");
  EXPECT_THROW(db.prepare("SELECT 1; SELECT 2"), DatabaseError);
  EXPECT_EQ(db.open_statements(), 0U);
  auto kept = db.prepare("SELECT 1");
  EXPECT_EQ(db.open_statements(), 1U);
}

TEST(Durability, FullDiskSaysSoWhateverSqliteCallsIt) {
  EXPECT_THAT(describe_sqlite_error(SQLITE_FULL, 0, "database or disk is full"),
              HasSubstr("the disk is full"));
  // Growing the WAL index, syncing or truncating on a full disk: "disk I/O error" in SQLite.
  for (const int rc : {SQLITE_IOERR_WRITE, SQLITE_IOERR_SHMSIZE, SQLITE_IOERR_FSYNC,
                       SQLITE_IOERR_TRUNCATE, SQLITE_CANTOPEN})
    EXPECT_THAT(describe_sqlite_error(rc, ENOSPC, "disk I/O error"), HasSubstr("the disk is full"))
        << rc;
  EXPECT_TRUE(is_disk_full(SQLITE_IOERR_WRITE, ENOSPC));
  EXPECT_FALSE(is_disk_full(SQLITE_IOERR_READ, EIO));
  // A stale OS error does not turn a constraint failure into a full disk.
  EXPECT_FALSE(is_disk_full(SQLITE_CONSTRAINT_UNIQUE, ENOSPC));
  EXPECT_THAT(describe_sqlite_error(SQLITE_IOERR_READ, EIO, "disk I/O error"),
              HasSubstr("Input/output error"));
}

// A writer that dies (here: _exit without closing) leaves its WAL behind.
void crash_a_writer(const std::string& path) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      auto* store = new RunStore(path);  // never closed: the process just ends
      store_run(*store, 20'000, "in the WAL");
    } catch (...) {
      _exit(2);
    }
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_GT(std::filesystem::file_size(path + "-wal"), 0U);
}

TEST(Durability, CrashLeftFileIsCheckedBeforeWriting) {
  TempDir dir;
  const std::string path = dir.file("crashed.db");
  {
    RunStore store(path);
    store_run(store, 200'000, "committed");
  }
  EXPECT_FALSE(left_by_crashed_writer(path));  // closed cleanly: no WAL
  crash_a_writer(path);
  EXPECT_TRUE(left_by_crashed_writer(path));
  {
    // While we hold the file open ourselves, the WAL is ours, not a crash's.
    Database open_here(path);
    EXPECT_FALSE(left_by_crashed_writer(path));
  }
  // Damage b-tree pages in the main file (the header page stays valid).
  std::string bytes = test::read_file(path);
  ASSERT_GT(bytes.size(), 32U * 4096);
  for (std::size_t page = 8; page < 24; ++page)
    for (std::size_t i = 0; i < 64; ++i)
      bytes[page * 4096 + i] = static_cast<char>(0xA5 ^ i);
  test::write_file(path, bytes);
  const std::string message = error_of([&] {
    RunStore store(path);
    store_run(store, 1000, "written into a damaged file");
  });
  EXPECT_THAT(message, HasSubstr(path + ": the database is damaged"));
  EXPECT_THAT(message, HasSubstr("nothing was written"));
}

TEST(Durability, IntactFileAfterACrashOpensAndKeepsItsRuns) {
  TempDir dir;
  const std::string path = dir.file("crashed-ok.db");
  {
    RunStore store(path);
    store_run(store, 1000, "before");
  }
  crash_a_writer(path);
  RunStore store(path);
  EXPECT_EQ(store.run_count(), 2);
  store_run(store, 1000, "after");
  EXPECT_EQ(store.run_count(), 3);
}

}  // namespace
}  // namespace fragscope::storage
