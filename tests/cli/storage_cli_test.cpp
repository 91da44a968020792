// The storage commands of fragscope-cli, run as a real process against real database files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "cli/cli_process.h"
#include "engine/snapshot/snapshot.h"
#include "storage/db/run_store.h"
#include "storage/db/schema.h"
#include "storage/storage_test_util.h"

namespace fragscope::test {
namespace {

using storage::RunId;
using storage::RunRecord;
using storage::RunStatus;
using storage::RunStore;

class StorageCli : public ::testing::Test {
 protected:
  RunId add_run(const std::string& name, std::size_t events) {
    RunStore store(db);
    RunRecord record;
    record.name = name;
    const RunId id = store.begin_run(record);
    store.append_events(id, storage::test::synthetic_trace(events, 21));
    store.finish_run(id, RunStatus::ok);
    return id;
  }
  // Exit 2 and exactly one line on stderr containing `needle`.
  static void expect_one_line_error(const CliResult& result, const std::string& needle) {
    EXPECT_EQ(result.exit_code, 2) << result.err;
    EXPECT_NE(result.err.find(needle), std::string::npos) << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  }
  storage::test::TempDir dir;
  std::string db = dir.file("cli.db");
};

TEST_F(StorageCli, CountOnAMissingDatabaseIsZeroAndCreatesNothing) {
  const auto result = run_cli({"runs", "--db", db, "--count"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "0\n");
  EXPECT_FALSE(std::filesystem::exists(db));
}

TEST_F(StorageCli, RunsListsAsTableJsonAndCount) {
  add_run("first run", 100);
  add_run("second run", 200);
  auto count = run_cli({"runs", "--db", db, "--count"});
  EXPECT_EQ(count.exit_code, 0);
  EXPECT_EQ(count.out, "2\n");
  auto table = run_cli({"runs", "--db", db});
  EXPECT_EQ(table.exit_code, 0);
  EXPECT_NE(table.out.find("second run"), std::string::npos);
  auto json = run_cli({"runs", "--db", db, "--json", "-"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto runs = nlohmann::json::parse(json.out);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1]["name"], "second run");
  EXPECT_EQ(runs[1]["event_count"], 200);
  EXPECT_EQ(runs[1]["status"], "ok");
  EXPECT_TRUE(runs[1]["summary"]["peaks"].contains("reserved"));
}

TEST_F(StorageCli, DeleteRemovesTheRun) {
  const RunId first = add_run("doomed", 100);
  add_run("kept", 100);
  auto result = run_cli({"delete", "--run", std::to_string(first.value), "--db", db});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("doomed"), std::string::npos);
  EXPECT_EQ(run_cli({"runs", "--db", db, "--count"}).out, "1\n");
  expect_one_line_error(run_cli({"delete", "--run", std::to_string(first.value), "--db", db}),
                        "no run with id " + std::to_string(first.value));
}

TEST_F(StorageCli, DeleteNeedsARunAndAnExistingDatabase) {
  auto usage = run_cli({"delete", "--db", db});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_NE(usage.err.find("--run ID is required"), std::string::npos);
  expect_one_line_error(run_cli({"delete", "--run", "1", "--db", db}), "no such database");
  EXPECT_FALSE(std::filesystem::exists(db));
}

TEST_F(StorageCli, TimelineJsonHasThePeaksAndBuckets) {
  const RunId id = add_run("timeline", 50'000);
  auto result = run_cli({"timeline", "--db", db, "--run", std::to_string(id.value), "--buckets",
                         "25", "--json", "-"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto timeline = nlohmann::json::parse(result.out);
  const auto run = RunStore(db).run(id);
  EXPECT_EQ(timeline["run_id"], id.value);
  EXPECT_EQ(timeline["peak_reserved"], run.summary["peaks"]["reserved"]);
  EXPECT_EQ(timeline["peak_allocated"], run.summary["peaks"]["allocated"]);
  ASSERT_EQ(timeline["buckets"].size(), 25u);
  const auto& bucket = timeline["buckets"][0];
  for (const char* key :
       {"t0", "t1", "allocated_max", "allocated_min", "reserved_max", "reserved_min", "active_max",
        "active_min", "requested_max", "requested_min", "first_event", "end_event"})
    EXPECT_TRUE(bucket.contains(key)) << key;
  EXPECT_EQ(timeline["buckets"].back()["end_event"], 50'000);
  // The text form names the run.
  auto text = run_cli({"timeline", "--db", db, "--run", std::to_string(id.value)});
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.out.find("timeline"), std::string::npos);
}

TEST_F(StorageCli, TimelineErrors) {
  add_run("x", 10);
  expect_one_line_error(run_cli({"timeline", "--db", db, "--run", "42"}), "no run with id 42");
  auto zero = run_cli({"timeline", "--db", db, "--run", "1", "--buckets", "0"});
  EXPECT_EQ(zero.exit_code, 2);
  auto missing = run_cli({"timeline", "--db", db});
  EXPECT_EQ(missing.exit_code, 2);
}

TEST_F(StorageCli, BadDatabaseFilesAreOneLineErrors) {
  storage::test::write_file(db, std::string(4096, 'z'));
  expect_one_line_error(run_cli({"runs", "--db", db}), "not a database");
  expect_one_line_error(run_cli({"timeline", "--db", db, "--run", "1"}), db);
  {
    std::filesystem::remove(db);
    RunStore store(db);
    store.database().exec("PRAGMA user_version = 999");
  }
  expect_one_line_error(run_cli({"runs", "--db", db, "--count"}), "newer FragScope");
}

TEST_F(StorageCli, VacuumShrinksAfterDelete) {
  const RunId big = add_run("big", 300'000);
  add_run("small", 10);
  const auto with_big = std::filesystem::file_size(db);
  ASSERT_EQ(run_cli({"delete", "--run", std::to_string(big.value), "--db", db}).exit_code, 0);
  const auto result = run_cli({"vacuum", "--db", db});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("bytes"), std::string::npos);
  EXPECT_LT(std::filesystem::file_size(db), with_big / 4);
  EXPECT_EQ(run_cli({"runs", "--db", db, "--count"}).out, "1\n");
}

// A store made with 4 KiB pages (SQLite's default, before kNewFilePageSize) gets the new size,
// and says so; while another connection has it open, it says why not.
TEST_F(StorageCli, VacuumGivesAStoreOfSmallerPagesTheNewSize) {
  {
    storage::Database raw(db);
    raw.exec("PRAGMA page_size = 4096");
    storage::migrate_to(raw, storage::latest_schema_version());
  }
  add_run("old", 1000);
  {
    storage::Database reader(db, storage::OpenMode::read_only);
    ASSERT_EQ(reader.query_int("SELECT count(*) FROM runs"), 1);
    const auto kept = run_cli({"vacuum", "--db", db});
    EXPECT_EQ(kept.exit_code, 0) << kept.err;
    EXPECT_NE(
        kept.out.find("pages stay 4096 bytes, not " + std::to_string(storage::kNewFilePageSize) +
                      " (another program is using the file; vacuum again once it is closed)"),
        std::string::npos)
        << kept.out;
  }
  const auto resized = run_cli({"vacuum", "--db", db});
  EXPECT_EQ(resized.exit_code, 0) << resized.err;
  EXPECT_NE(resized.out.find("; pages 4096 -> " + std::to_string(storage::kNewFilePageSize)),
            std::string::npos)
      << resized.out;
  const auto again = run_cli({"vacuum", "--db", db});
  EXPECT_EQ(again.out.find("pages"), std::string::npos) << again.out;
  EXPECT_EQ(run_cli({"runs", "--db", db, "--count"}).out, "1\n");
}

std::string fixture(const std::string& name) {
  return std::string(FRAGSCOPE_FIXTURES) + "/" + name;
}

TEST_F(StorageCli, ImportPrintsTheContractJsonAndStoresTheRun) {
  auto result = run_cli({"import", fixture("gpt_oom_cap.pickle.gz"), "--db", db, "--json", "-"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto out = nlohmann::json::parse(result.out);
  EXPECT_EQ(out["events"], 22135);  // the README's trace entry count
  EXPECT_EQ(out["ooms"], 1);
  EXPECT_EQ(out["truncated"], false);
  EXPECT_EQ(out["segments"], 79);
  const RunId id{out["run_id"].get<std::int64_t>()};
  auto runs = nlohmann::json::parse(run_cli({"runs", "--db", db, "--json", "-"}).out);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0]["name"], "gpt_oom_cap");
  EXPECT_EQ(runs[0]["source"], "imported");
  EXPECT_EQ(runs[0]["status"], "oom");

  // The timeline's peak is PyTorch's own reserved_bytes.all.peak for this recording.
  auto timeline = run_cli({"timeline", "--db", db, "--run", std::to_string(id.value), "--buckets",
                           "300", "--json", "-"});
  ASSERT_EQ(timeline.exit_code, 0) << timeline.err;
  EXPECT_EQ(nlohmann::json::parse(timeline.out)["peak_reserved"], 6392119296);
}

TEST_F(StorageCli, ImportTakesANameAndPrintsASummaryLine) {
  auto result = run_cli(
      {"import", fixture("streams_default.pickle.gz"), "--db", db, "--name", "two streams"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("31348 events"), std::string::npos) << result.out;
  EXPECT_EQ(RunStore(db).list_runs().at(0).name, "two streams");
}

TEST_F(StorageCli, FailedImportWritesNothing) {
  // A truncated snapshot: the reader fails, and no database appears.
  const std::string bytes = storage::test::read_file(fixture("streams_default.pickle.gz"));
  const std::string broken = dir.file("broken.pickle.gz");
  storage::test::write_file(broken, bytes.substr(0, bytes.size() / 2));
  expect_one_line_error(run_cli({"import", broken, "--db", db}), "broken.pickle.gz");
  EXPECT_FALSE(std::filesystem::exists(db));
  // With runs already stored, a failing import leaves them as they were.
  add_run("earlier", 100);
  expect_one_line_error(run_cli({"import", broken, "--db", db}), "broken.pickle.gz");
  expect_one_line_error(
      run_cli({"import", fixture("streams_default.pickle.gz"), "--db", db, "--device", "4"}),
      "no device 4");
  EXPECT_EQ(run_cli({"runs", "--db", db, "--count"}).out, "1\n");
  auto usage = run_cli({"import", "--db", db});
  EXPECT_EQ(usage.exit_code, 2);
}

TEST_F(StorageCli, ExportSnapshotWritesWhatWasImported) {
  const std::string source = fixture("gpt_oom_cap.pickle.gz");
  auto imported = run_cli({"import", source, "--db", db, "--json", "-"});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  const auto id = std::to_string(nlohmann::json::parse(imported.out)["run_id"].get<int>());
  const auto original = snapshot::read_snapshot(source);
  for (const std::string name : {"out.pickle", "out.pickle.gz"}) {
    const std::string out = dir.file(name);
    auto result = run_cli({"export-snapshot", "--db", db, "--run", id, "-o", out, "--json", "-"});
    ASSERT_EQ(result.exit_code, 0) << result.err;
    EXPECT_EQ(nlohmann::json::parse(result.out)["events"], 22135);
    EXPECT_EQ(result.err, "") << "no warnings for an imported PyTorch trace";
    // Read back with the same reader PyTorch files go through.
    const auto exported = snapshot::read_snapshot(out);
    ASSERT_EQ(exported.device_traces.size(), 1u);
    EXPECT_TRUE(exported.device_traces[0] == original.device_traces[0]);
    EXPECT_EQ(exported.segments.size(), original.segments.size());
    EXPECT_EQ(exported.allocator_settings, original.allocator_settings);
  }
}

TEST_F(StorageCli, ExportSnapshotErrors) {
  add_run("x", 10);
  expect_one_line_error(
      run_cli({"export-snapshot", "--db", db, "--run", "9", "-o", dir.file("x.pickle")}),
      "no run with id 9");
  auto usage = run_cli({"export-snapshot", "--db", db, "--run", "1"});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_NE(usage.err.find("-o OUT.pickle is required"), std::string::npos);
  auto unwritable =
      run_cli({"export-snapshot", "--db", db, "--run", "1", "-o", "/nonexistent-dir/x.pickle"});
  EXPECT_EQ(unwritable.exit_code, 2) << unwritable.err;
  EXPECT_NE(unwritable.err.find("/nonexistent-dir/x.pickle"), std::string::npos) << unwritable.err;
}

// `summary` prints PyTorch's own memory_summary() of the recording at its end, and of any event
// before it; a cursor past the run is a usage error naming the run's length.
TEST_F(StorageCli, SummaryPrintsPyTorchsMemorySummaryAtAnEvent) {
  ASSERT_EQ(run_cli({"import", fixture("random_default.pickle.gz"), "--db", db}).exit_code, 0);
  const auto end = run_cli({"summary", "--run", "1", "--db", db});
  ASSERT_EQ(end.exit_code, 0) << end.err;
  std::ifstream expected_file(fixture("random_default.summary.txt"), std::ios::binary);
  const std::string expected((std::istreambuf_iterator<char>(expected_file)),
                             std::istreambuf_iterator<char>());
  EXPECT_EQ(end.out, expected);
  // stderr says only which release's allocator rules the replay used, on one line.
  const auto only_the_rules_note = [](const std::string& err) {
    return err.rfind("note: replayed under PyTorch ", 0) == 0 && err.find('\n') == err.size() - 1;
  };
  EXPECT_TRUE(only_the_rules_note(end.err)) << end.err;

  const auto early = run_cli({"summary", "--run", "1", "--db", db, "--at", "100"});
  ASSERT_EQ(early.exit_code, 0) << early.err;
  EXPECT_NE(early.out, end.out);
  EXPECT_NE(early.out.find("PyTorch CUDA memory summary, device ID 0"), std::string::npos);

  const auto abbreviated = run_cli({"summary", "--run", "1", "--db", db, "--abbreviated"});
  ASSERT_EQ(abbreviated.exit_code, 0);
  EXPECT_LT(abbreviated.out.size(), end.out.size());

  const auto past = run_cli({"summary", "--run", "1", "--db", db, "--at", "99999999"});
  EXPECT_EQ(past.exit_code, 2);
  EXPECT_NE(past.err.find("99999999"), std::string::npos) << past.err;

  // A capped recording fails where PyTorch failed only with its cap, which the import takes from
  // the NAME.stats.json beside the snapshot.
  const auto imported =
      run_cli({"import", fixture("gpt_oom_cap.pickle.gz"), "--db", db, "--json", "-"});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  EXPECT_NE(nlohmann::json::parse(imported.out)["recorded_stats"].get<std::string>().find(
                "gpt_oom_cap.stats.json"),
            std::string::npos);
  const auto capped = run_cli({"summary", "--run", "2", "--db", db});
  ASSERT_EQ(capped.exit_code, 0) << capped.err;
  std::ifstream capped_file(fixture("gpt_oom_cap.summary.txt"), std::ios::binary);
  EXPECT_EQ(capped.out, std::string((std::istreambuf_iterator<char>(capped_file)),
                                    std::istreambuf_iterator<char>()));
  EXPECT_TRUE(only_the_rules_note(capped.err)) << capped.err;

  // --stats FILE names the recording's stats explicitly; a broken one is refused by name and
  // nothing is stored.
  const std::string broken = dir.file("broken.stats.json");
  std::ofstream(broken) << "{ nope";
  const auto refused =
      run_cli({"import", fixture("random_default.pickle.gz"), "--db", db, "--stats", broken});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("broken.stats.json"), std::string::npos) << refused.err;
  const auto runs = nlohmann::json::parse(run_cli({"runs", "--db", db, "--json", "-"}).out);
  EXPECT_EQ(runs.size(), 2u);
}

}  // namespace
}  // namespace fragscope::test
