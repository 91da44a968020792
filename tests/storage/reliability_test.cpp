// What must survive: a writer killed mid-ingest, damaged files, read-only files, a full disk and
// readers beside a writer. Every failure is a DatabaseError naming the file; nothing committed
// earlier is lost.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "storage/db/run_store.h"
#include "storage/db/schema.h"
#include "storage_test_util.h"

namespace fragscope::storage {
namespace {

using test::synthetic_trace;
using test::TempDir;

RunRecord named(std::string name) {
  RunRecord record;
  record.name = std::move(name);
  return record;
}

RunId store_run(RunStore& store, std::span<const TraceEvent> events, std::string name) {
  const RunId id = store.begin_run(named(std::move(name)));
  store.append_events(id, events);
  store.finish_run(id, RunStatus::ok);
  return id;
}

std::string integrity(Database& db) {
  auto check = db.prepare("PRAGMA integrity_check");
  return check.step() ? check.column_text(0) : "";
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const DatabaseError& e) {
    return e.what();
  }
  return "";
}

TEST(Reliability, KilledWriterLeavesEarlierRunsAndNoPartialRun) {
  TempDir dir;
  const std::string path = dir.file("killed.db");
  const auto events = synthetic_trace(100'000, 3);
  {
    RunStore store(path);
    store_run(store, events, "committed");
  }
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child ingests forever; the parent kills it mid-transaction.
    close(ready[0]);
    try {
      RunStore store(path);
      const RunId id = store.begin_run(named("killed mid-ingest"));
      const auto more = synthetic_trace(kEventsPerChunk, 4);
      store.append_events(id, more);
      const char byte = 1;
      if (write(ready[1], &byte, 1) != 1)
        _exit(3);
      for (;;)
        store.append_events(id, more);
    } catch (...) {
      _exit(2);
    }
  }
  close(ready[1]);
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1) << "child failed before ingesting";
  close(ready[0]);
  usleep(50'000);  // let it write a few more chunks into the WAL
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));

  RunStore store(path);
  EXPECT_EQ(integrity(store.database()), "ok");
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 1u) << "the killed run must be absent";
  EXPECT_EQ(runs[0].name, "committed");
  EXPECT_EQ(store.events(runs[0].id, 0, events.size()), events);
  EXPECT_EQ(store.database().query_int("SELECT count(*) FROM event_chunks WHERE run_id != " +
                                       std::to_string(runs[0].id.value)),
            0);
  // And the database takes new runs.
  store_run(store, synthetic_trace(10), "after");
  EXPECT_EQ(store.run_count(), 2);
}

TEST(Reliability, NotADatabaseIsAClearErrorAndUntouched) {
  TempDir dir;
  const std::string path = dir.file("notes.db");
  const std::string text(8192, 'x');
  test::write_file(path, text);
  const std::string message = error_of([&] { RunStore store(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("not a database"), std::string::npos) << message;
  EXPECT_EQ(test::read_file(path), text);
}

TEST(Reliability, CorruptPagesAreReportedNotCrashed) {
  TempDir dir;
  const std::string path = dir.file("corrupt.db");
  RunId id;
  {
    RunStore store(path);
    id = store_run(store, synthetic_trace(200'000, 6), "soon corrupt");
  }
  std::string bytes = test::read_file(path);
  ASSERT_GT(bytes.size(), 64u * 4096);
  // Scribble over everything after the first page (the header stays valid).
  for (std::size_t i = 4096; i < bytes.size(); i += 7)
    bytes[i] = static_cast<char>(i * 31);
  test::write_file(path, bytes);
  const std::string message = error_of([&] {
    RunStore store(path);
    store.list_runs();
    store.events(id, 0, 200'000);
    store.timeline(id, 100);
    store.segment_state(id, 150'000);
  });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_FALSE(message.empty()) << "corruption went unnoticed";
}

TEST(Reliability, CorruptBlobInsideAValidDatabaseNamesTheRun) {
  TempDir dir;
  const std::string path = dir.file("blob.db");
  RunStore store(path);
  const RunId id = store_run(store, synthetic_trace(1000, 6), "blob");
  store.database().exec("UPDATE event_chunks SET data = x'01ffffffff'");
  const std::string message = error_of([&] { store.events(id, 0, 1000); });
  EXPECT_NE(message.find("run " + std::to_string(id.value)), std::string::npos) << message;
  EXPECT_NE(message.find("corrupt"), std::string::npos) << message;
}

TEST(Reliability, TruncatedFileIsAClearError) {
  TempDir dir;
  const std::string path = dir.file("truncated.db");
  RunId id;
  {
    RunStore store(path);
    id = store_run(store, synthetic_trace(200'000, 7), "big");
  }
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 3);
  const std::string message = error_of([&] {
    RunStore store(path);
    store.list_runs();
    store.events(id, 0, 200'000);
    store.timeline(id, 0, 200'000, 10'000);
  });
  EXPECT_NE(message.find(path), std::string::npos) << message;
}

TEST(Reliability, ReadOnlyOpenReadsButRefusesWrites) {
  TempDir dir;
  const std::string path = dir.file("ro.db");
  const auto events = synthetic_trace(5000, 8);
  {
    RunStore store(path);
    store_run(store, events, "kept");
  }
  RunStore reader(path, OpenMode::read_only);
  ASSERT_EQ(reader.run_count(), 1);
  EXPECT_EQ(reader.events(reader.list_runs()[0].id, 0, 5000), events);
  const std::string message = error_of([&] { reader.begin_run(named("nope")); });
  EXPECT_NE(message.find("read-only"), std::string::npos) << message;
  EXPECT_FALSE(reader.ingesting());
  EXPECT_EQ(reader.run_count(), 1);
}

TEST(Reliability, WriteProtectedFileReadsButRefusesWrites) {
  if (geteuid() == 0)
    GTEST_SKIP() << "root ignores file permissions";
  TempDir dir;
  const std::string path = dir.file("protected.db");
  {
    RunStore store(path);
    store_run(store, synthetic_trace(100), "kept");
  }
  std::filesystem::permissions(path, std::filesystem::perms::owner_read);
  RunStore store(path);
  EXPECT_EQ(store.run_count(), 1);
  const std::string message = error_of([&] {
    const RunId id = store.begin_run(named("nope"));
    store.finish_run(id, RunStatus::ok);
  });
  EXPECT_NE(message.find("read-only"), std::string::npos) << message;
}

TEST(Reliability, FullDiskRollsTheRunBackAndKeepsEarlierRuns) {
  TempDir dir;
  const std::string path = dir.file("full.db");
  RunStore store(path);
  const auto events = synthetic_trace(3000, 9);
  const RunId kept = store_run(store, events, "kept");
  // Simulate a full disk: the database may not grow past a few more pages.
  const auto pages = store.database().query_int("PRAGMA page_count");
  store.database().exec("PRAGMA max_page_count = " + std::to_string(pages + 8));
  bool full = false;
  try {
    const RunId id = store.begin_run(named("too big"));
    store.append_events(id, synthetic_trace(20 * kEventsPerChunk, 10));
    store.finish_run(id, RunStatus::ok);
  } catch (const DatabaseFullError& e) {
    full = true;
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("full"), std::string::npos);
  }
  EXPECT_TRUE(full);
  EXPECT_FALSE(store.ingesting());
  EXPECT_EQ(store.run_count(), 1);
  EXPECT_EQ(store.events(kept, 0, events.size()), events);
  EXPECT_EQ(integrity(store.database()), "ok");
  // With room again, the store keeps working.
  store.database().exec("PRAGMA max_page_count = 1073741823");
  store_run(store, synthetic_trace(100), "fits");
  EXPECT_EQ(store.run_count(), 2);
}

TEST(Reliability, ReadersSeeCommittedRunsWhileAWriterIngests) {
  TempDir dir;
  const std::string path = dir.file("concurrent.db");
  RunStore writer(path);
  const auto first = synthetic_trace(10'000, 12);
  const RunId committed = store_run(writer, first, "committed");

  RunStore reader(path, OpenMode::read_only);
  const RunId pending = writer.begin_run(named("in progress"));
  writer.append_events(pending, synthetic_trace(3 * kEventsPerChunk, 13));
  // The uncommitted run is invisible; the committed one reads normally.
  EXPECT_EQ(reader.run_count(), 1);
  EXPECT_EQ(reader.events(committed, 0, first.size()), first);
  EXPECT_EQ(reader.timeline(committed, 50).size(), 50u);
  writer.finish_run(pending, RunStatus::ok);
  EXPECT_EQ(reader.run_count(), 2);
  EXPECT_EQ(reader.run(pending).event_count, 3 * kEventsPerChunk);
}

TEST(Reliability, ConcurrentReaderThreadDuringIngest) {
  TempDir dir;
  const std::string path = dir.file("threads.db");
  RunStore writer(path);
  const RunId committed = store_run(writer, synthetic_trace(5000, 14), "committed");
  std::atomic<bool> done = false;
  std::atomic<int> reads = 0;
  std::string reader_error;
  std::thread reader_thread([&] {
    try {
      RunStore reader(path, OpenMode::read_only);
      while (!done) {
        if (reader.run_count() < 1 || reader.timeline(committed, 20).empty())
          reader_error = "lost the committed run";
        ++reads;
      }
    } catch (const std::exception& e) {
      reader_error = e.what();
    }
  });
  const RunId id = writer.begin_run(named("big"));
  const auto batch = synthetic_trace(kEventsPerChunk, 15);
  for (int i = 0; i < 6; ++i)
    writer.append_events(id, batch);
  writer.finish_run(id, RunStatus::ok);
  done = true;
  reader_thread.join();
  EXPECT_EQ(reader_error, "");
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(writer.run_count(), 2);
}

}  // namespace
}  // namespace fragscope::storage
