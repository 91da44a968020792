// Hostile inputs to fragscope-cli: FIFOs, nesting 200k deep, numbers a double cannot hold, and
// `--json` pointed at something that is not a regular file. Each is exit 2 with one line naming
// the file (never a crash or a hang), or, for --json, the target left what it was.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include <nlohmann/json.hpp>

#include "cli/cli_process.h"
#include "engine/snapshot/pickle_writer.h"
#include "engine/snapshot/snapshot.h"
#include "storage/storage_test_util.h"

namespace fragscope::test {
namespace {

using ::testing::HasSubstr;

class HostileInput : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = dir.file(name);
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::string fifo(const std::string& name) {
    const std::string path = dir.file(name);
    EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0);
    return path;
  }
  static void expect_one_line_error(const CliResult& result, const std::string& needle) {
    EXPECT_EQ(result.exit_code, 2) << result.err;
    EXPECT_THAT(result.err, HasSubstr(needle));
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  }
  std::string fixture_copy(const std::string& stem) {
    const std::string path = dir.file(stem + ".pickle.gz");
    std::filesystem::copy_file(std::string(FRAGSCOPE_FIXTURES) + "/gpt_oom_cap.pickle.gz", path);
    return path;
  }
  storage::test::TempDir dir;
  std::string db = dir.file("hostile.db");
};

TEST_F(HostileInput, FifoSnapshotIsRefusedNotWaitedOn) {
  const std::string pipe = fifo("snapshot.pickle");
  expect_one_line_error(run_cli({"import", pipe, "--db", db}), pipe + ": the snapshot is a FIFO");
  expect_one_line_error(run_cli({"info", pipe}), "FIFO");
}

TEST_F(HostileInput, FifoExperimentAndStatsAreRefused) {
  const std::string experiment = fifo("experiment.json");
  expect_one_line_error(run_cli({"run", experiment, "--db", db}),
                        experiment + ": the experiment file is a FIFO");
  const std::string snapshot = fixture_copy("rec");
  const std::string stats = fifo("rec.stats.json");
  expect_one_line_error(run_cli({"import", snapshot, "--db", db}),
                        stats + ": the stats file is a FIFO");
  expect_one_line_error(run_cli({"import", snapshot, "--db", db, "--stats", stats}), "FIFO");
}

TEST_F(HostileInput, DeepExperimentIsRefusedWithThePlace) {
  const std::string file =
      write("deep.json", "{\"name\": \"x\", \"model\": " + std::string(200'000, '[') +
                             std::string(200'000, ']') + "}");
  expect_one_line_error(run_cli({"run", file, "--db", db}),
                        file + ": line 1, column 87: JSON nested deeper than 64 levels");
}

TEST_F(HostileInput, LongDottedOverrideIsRefused) {
  std::string dotted = "training";
  for (int i = 0; i < 100'000; ++i)
    dotted += ".x";
  const std::string file = write("dotted.json", R"({"name": "x", "device": {"preset": "L4"},
    "model": {"kind": "gpt", "layers": 1, "hidden": 64, "heads": 1, "vocab": 100},
    "variants": [{"name": "v", "set": {")" + dotted +
                                                    R"(": 1}}]})");
  expect_one_line_error(run_cli({"run", file, "--db", db}), "more than 8 dotted segments");
}

TEST_F(HostileInput, DeepCompanionStatsAreRefusedWithTheFile) {
  const std::string snapshot = fixture_copy("deep");
  const std::string stats =
      write("deep.stats.json",
            "{\"memory_stats\": " + std::string(200'000, '[') + std::string(200'000, ']') + "}");
  expect_one_line_error(run_cli({"import", snapshot, "--db", db}),
                        stats + ": line 1, column 81: JSON nested deeper than 64 levels");
  EXPECT_FALSE(std::filesystem::exists(db)) << "nothing may be written";
}

TEST_F(HostileInput, NumberOutOfRangeIsExitTwoNamingTheFile) {
  const std::string file = write("big.json", "{\"name\": \"x\",\n  \"seed\": 1e400}");
  const CliResult result = run_cli({"run", file, "--db", db});
  expect_one_line_error(result, file + ": line 2, column 11: the number 1e400 is out of range");
  EXPECT_THAT(result.err, ::testing::Not(HasSubstr("internal error")));
}

TEST_F(HostileInput, JsonIntoAFifoWritesThroughAndKeepsTheFifo) {
  const std::string pipe = fifo("out.json");
  // The read end is open (non-blocking) before the CLI opens the FIFO to write, and read after it
  // exits: an empty database's list fits the pipe's buffer. A regression that renames over the
  // FIFO then fails here instead of leaving a reader blocked forever.
  const int read_end = ::open(pipe.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(read_end, 0) << std::strerror(errno);
  const CliResult result = run_cli({"runs", "--db", db, "--json", pipe});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = ::read(read_end, buffer, sizeof buffer)) > 0;)
    text.append(buffer, static_cast<std::size_t>(n));
  ::close(read_end);
  struct stat info {};
  ASSERT_EQ(::stat(pipe.c_str(), &info), 0);
  EXPECT_TRUE(S_ISFIFO(info.st_mode)) << "--json replaced the FIFO with a regular file";
  EXPECT_FALSE(std::filesystem::exists(pipe + ".partial"));
  ASSERT_FALSE(text.empty()) << "nothing came through the FIFO";
  EXPECT_TRUE(nlohmann::json::parse(text).is_array()) << text;
}

TEST_F(HostileInput, JsonIntoACharacterDeviceLeavesItADevice) {
  // A private null device (1,3) in the test's own folder, never the machine's /dev/null: a
  // regression that renames over its target must not be able to break the machine.
  const std::string device = dir.file("null");
  if (::mknod(device.c_str(), S_IFCHR | 0600, ::makedev(1, 3)) != 0)
    GTEST_SKIP() << "cannot create a character device here (needs root): " << std::strerror(errno);
  if (!std::ofstream(device, std::ios::binary))
    GTEST_SKIP() << "the temporary folder does not allow devices (mounted nodev)";
  const CliResult result = run_cli({"runs", "--db", db, "--json", device});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  struct stat info {};
  ASSERT_EQ(::stat(device.c_str(), &info), 0);
  EXPECT_TRUE(S_ISCHR(info.st_mode)) << "--json replaced the device with a regular file";
  EXPECT_EQ(info.st_rdev, ::makedev(1, 3));
  EXPECT_FALSE(std::filesystem::exists(device + ".partial"));
}

TEST_F(HostileInput, JsonIntoARegularFileIsReplacedWhole) {
  const std::string target = write("out.json", std::string(100'000, 'x'));
  ASSERT_EQ(run_cli({"runs", "--db", db, "--json", target}).exit_code, 0);
  std::ifstream in(target);
  EXPECT_TRUE(nlohmann::json::parse(in).is_array());
  EXPECT_FALSE(std::filesystem::exists(target + ".partial"));
}

TEST_F(HostileInput, InfoErrorsFromTheTimelineNameTheFile) {
  // An inconsistent trace (the same block allocated twice) cannot be laid out.
  snapshot::Snapshot snap =
      snapshot::read_snapshot(std::string(FRAGSCOPE_FIXTURES) + "/gpt_oom_cap.pickle.gz");
  auto& trace = snap.device_traces.at(0);
  const auto first_alloc = std::find_if(trace.begin(), trace.end(), [](const TraceEvent& event) {
    return event.action == TraceAction::alloc;
  });
  ASSERT_NE(first_alloc, trace.end());
  trace.insert(first_alloc + 1, *first_alloc);
  const std::string path = dir.file("twice.pickle");
  snapshot::write_snapshot(snap, path);
  const CliResult result = run_cli({"info", path});
  EXPECT_NE(result.exit_code, 1) << result.err;  // never an internal error
  if (result.exit_code != 0)
    expect_one_line_error(result, "error: " + path + ": ");
}

// Times of ±2^63 (issue #18): their difference overflowed int64 in info's duration (undefined
// behaviour; in practice a wrap to -1 µs, so a negative duration).
TEST_F(HostileInput, InfoDurationOfTimesAtTheLimitsIsTheirTrueSpan) {
  snapshot::Snapshot snap =
      snapshot::read_snapshot(std::string(FRAGSCOPE_FIXTURES) + "/gpt_oom_cap.pickle.gz");
  auto& trace = snap.device_traces.at(0);
  ASSERT_GE(trace.size(), 2U);
  trace.front().time_us = std::numeric_limits<std::int64_t>::min();
  trace.back().time_us = std::numeric_limits<std::int64_t>::max();
  const std::string path = dir.file("extreme-times.pickle");
  snapshot::write_snapshot(snap, path);
  const CliResult result = run_cli({"info", path, "--json", "-"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto device = nlohmann::json::parse(result.out).at("devices").at(0);
  EXPECT_DOUBLE_EQ(device.at("duration_s").get<double>(), 0x1p64 / 1e6);
}

}  // namespace
}  // namespace fragscope::test
