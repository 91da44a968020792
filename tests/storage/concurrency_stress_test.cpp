// Imports while other processes read the same database, checkpoint it (PASSIVE and TRUNCATE),
// vacuum it and map it (PRAGMA mmap_size), and while another thread of the importing process
// opens and closes readers as the GUI's pages do: every import commits whole, `PRAGMA
// integrity_check` passes after each, and no process dies of a signal (the GUI once died of
// SIGBUS in sqlite3WalFindFrame during an import beside a reader).
//
// FRAGSCOPE_STRESS_IMPORTS and FRAGSCOPE_STRESS_EVENTS scale it up (defaults: 2 imports of
// 40000 events, a few seconds, for CI).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "storage/db/run_store.h"
#include "storage_test_util.h"

namespace fragscope::storage {
namespace {

std::size_t from_env(const char* name, std::size_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::strtoull(value, nullptr, 10) : fallback;
}

bool stop_requested(const std::string& stop_file) {
  return std::filesystem::exists(stop_file);
}

// What each reader process does until the stop file appears. Busy/locked errors are expected
// (a vacuum waits for the importer's write lock and may time out); anything else fails it.
// Its number of completed rounds goes to rounds_file, for the summary the test prints.
int reader_loop(int role, const std::string& path, const std::string& stop_file,
                const std::string& rounds_file) {
  std::size_t rounds = 0;
  std::size_t attempts = 0;
  while (!stop_requested(stop_file)) {
    try {
      switch (role) {
        case 0: {  // a reader: lists runs, reads the newest run's events and timeline
          RunStore store(path, OpenMode::read_only);
          const auto runs = store.list_runs();
          if (!runs.empty()) {
            const RunId last = runs.back().id;
            (void)store.events(last, 0, 50'000);
            (void)store.timeline(last, 200);
          }
          break;
        }
        case 1: {  // checkpoints, the truncating kind included
          Database db(path, OpenMode::read_write);
          db.exec("PRAGMA wal_checkpoint(PASSIVE)");
          db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
          break;
        }
        case 2: {  // vacuums (shrinks and truncates the file under everyone)
          RunStore store(path, OpenMode::read_write);
          store.vacuum();
          break;
        }
        default: {  // maps the database file while reading it
          Database db(path, OpenMode::read_only);
          db.exec("PRAGMA mmap_size = 268435456");
          (void)db.query_int("SELECT count(*) FROM event_chunks");
          (void)db.query_int("SELECT sum(length(data)) FROM event_chunks");
          break;
        }
      }
      ++rounds;  // only rounds that completed: a busy or locked one is not counted
    } catch (const DatabaseError& e) {
      const std::string what = e.what();
      if (what.find("locked") == std::string::npos && what.find("busy") == std::string::npos) {
        std::fprintf(stderr, "reader %d: %s\n", role, e.what());
        return 3;
      }
    }
    ++attempts;
    usleep(2000);
  }
  test::write_file(rounds_file, std::to_string(rounds));
  return attempts > 0 ? 0 : 4;
}

TEST(ConcurrencyStress, ImportsBesideReadersCheckpointsAndVacuums) {
  test::TempDir dir;
  const std::string path = dir.file("stress.db");
  const std::string stop_file = dir.file("stop");
  const std::size_t imports = from_env("FRAGSCOPE_STRESS_IMPORTS", 2);
  const std::size_t events = from_env("FRAGSCOPE_STRESS_EVENTS", 40'000);
  { RunStore create(path); }

  std::vector<pid_t> readers;
  for (int role = 0; role < 4; ++role) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0)
      _exit(reader_loop(role, path, stop_file, dir.file("rounds-" + std::to_string(role))));
    readers.push_back(child);
  }
  // The GUI's pages open and close their own readers in the importing process.
  std::atomic<bool> stop{false};
  std::atomic<int> thread_failures{0};
  std::thread page_reader([&] {
    while (!stop) {
      try {
        RunStore store(path, OpenMode::read_only);
        for (const auto& run : store.list_runs())
          (void)store.timeline(run.id, 100);
      } catch (const DatabaseError& e) {
        if (std::string(e.what()).find("locked") == std::string::npos)
          ++thread_failures;
      }
    }
  });

  // Whatever fails below, the thread is joined and the reader processes are told to stop.
  struct StopAll {
    std::atomic<bool>& stop;
    std::thread& thread;
    std::string stop_file;
    ~StopAll() {
      stop = true;
      if (thread.joinable())
        thread.join();
      test::write_file(stop_file, "stop");
    }
  } stop_all{stop, page_reader, stop_file};

  // A vacuum in another process holds the write lock for as long as it takes; an import that
  // waited its 5 s for it fails with "locked" (a clear error, nothing written) and is retried.
  std::size_t locked_retries = 0;
  std::size_t committed = 0;
  std::size_t integrity_ok = 0;
  for (std::size_t i = 0; i < imports && locked_retries < 20 * imports; ++i) {
    const auto trace = test::synthetic_trace(events, static_cast<std::uint32_t>(100 + i));
    try {
      RunStore store(path);  // one connection per import, as the GUI's import job
      RunRecord record;
      record.name = "import " + std::to_string(i);
      const RunId id = store.begin_run(record);
      store.append_events(id, trace);
      store.finish_run(id, RunStatus::ok);
      ++committed;
    } catch (const DatabaseError& e) {
      const std::string what = e.what();
      if (what.find("locked") == std::string::npos) {
        ADD_FAILURE() << "import " << i << ": " << what;
        break;
      }
      ++locked_retries;
      --i;
      continue;
    }
    RunStore check(path, OpenMode::read_only);
    auto integrity = check.database().prepare("PRAGMA integrity_check");
    EXPECT_TRUE(integrity.step());
    EXPECT_EQ(integrity.column_text(0), "ok") << "after import " << i;
    integrity_ok += integrity.column_text(0) == "ok" ? 1 : 0;
    const auto runs = check.list_runs();
    EXPECT_EQ(runs.size(), committed) << "after import " << i;
    if (!runs.empty()) {
      EXPECT_EQ(check.events(runs.back().id, 0, events), trace) << "import " << i;
    }
  }
  EXPECT_EQ(committed, imports);

  stop = true;
  page_reader.join();
  test::write_file(stop_file, "stop");
  for (const pid_t reader : readers) {
    int status = 0;
    ASSERT_EQ(waitpid(reader, &status, 0), reader);
    EXPECT_FALSE(WIFSIGNALED(status)) << "a reader died of signal " << WTERMSIG(status);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "reader exit status " << WEXITSTATUS(status);
  }
  EXPECT_EQ(thread_failures.load(), 0);
  std::size_t rounds[4] = {};
  for (int role = 0; role < 4; ++role) {
    std::ifstream in(dir.file("rounds-" + std::to_string(role)));
    in >> rounds[role];
  }
  std::printf(
      "stress: %zu imports of %zu events committed beside 4 reader processes and a reader "
      "thread (%zu retried after waiting for a vacuum's lock); integrity_check ok after %zu of "
      "them; completed beside them: %zu reads, %zu checkpoint pairs (PASSIVE + TRUNCATE), %zu "
      "vacuums, %zu mmap reads\n",
      committed, events, locked_retries, integrity_ok, rounds[0], rounds[1], rounds[2], rounds[3]);
}

}  // namespace
}  // namespace fragscope::storage
