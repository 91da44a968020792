#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

#include "cli/cli_process.h"

namespace fragscope::test {
namespace {

std::string fixture(const std::string& name) {
  return std::string(FRAGSCOPE_FIXTURES) + "/" + name + ".pickle.gz";
}

TEST(CliInfo, JsonSummaryOfAnOomRun) {
  auto r = run_cli({"info", fixture("gpt_oom_cap"), "--json", "-"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["pickle_protocol"], 4);
  EXPECT_EQ(j["entries"], 22135);
  ASSERT_EQ(j["devices"].size(), 1u);
  const auto& d = j["devices"][0];
  EXPECT_EQ(d["truncated"], false);
  EXPECT_EQ(d["replay_matches_segments"], true);
  EXPECT_EQ(d["peak_reserved"], 6392119296);
  ASSERT_EQ(d["ooms"].size(), 1u);
  EXPECT_EQ(d["ooms"][0]["requested"], 175509504);
  EXPECT_EQ(d["ooms"][0]["device_free"], 142970322944);
  // The OOM's entry lies in the timeline's sixth slice of entries; the times are the
  // first and last entries'.
  EXPECT_EQ(d["ooms"][0]["entry"], 21262);
  EXPECT_EQ(d["first_time_us"], 1796232585010934);
  EXPECT_EQ(d["last_time_us"], 1796232589999061);
  EXPECT_EQ(d["actions"]["segment_alloc"].get<int>() + d["actions"]["segment_free"].get<int>(),
            125 + 46);
}

// Issue #18: a segment that wraps past 2^64 crashed info with SIGSEGV (exit 139).
TEST(CliInfo, AddressWrapIsOneLineNamingTheFileAndEntry) {
  const std::string file =
      std::string(FRAGSCOPE_SHARED_FIXTURES) + "/hostile/segfault-info-198b.pickle";
  if (!std::ifstream(file).good())
    GTEST_SKIP() << file << " is absent";
  auto r = run_cli({"info", file});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(file), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("trace entry 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("64-bit address space"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(CliInfo, TextSummaryNamesSettingsAndPeaks) {
  auto r = run_cli({"info", fixture("random_split64_round4")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("PYTORCH_CUDA_ALLOC_CONF='max_split_size_mb:64,roundup_power2_divisions:4'"),
            std::string::npos);
  EXPECT_NE(r.out.find("reserved 51329892352 B"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("90855 entries"), std::string::npos);
}

TEST(CliInfo, BadInputIsExitTwoWithOneLine) {
  auto dir = std::filesystem::path(FRAGSCOPE_BINARY_DIR) / "test-tmp" / "cli-info";
  std::filesystem::create_directories(dir);
  auto evil = dir / "evil.pickle";
  std::ofstream(evil, std::ios::binary) << std::string(
      "\x80\x04"
      "cos\nsystem\n.",
      14);
  auto r = run_cli({"info", evil.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("refusing opcode GLOBAL"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1);
  auto missing = run_cli({"info", (dir / "nope.pickle").string()});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("cannot open"), std::string::npos);
  EXPECT_EQ(run_cli({"info"}).exit_code, 2);
}

}  // namespace
}  // namespace fragscope::test
