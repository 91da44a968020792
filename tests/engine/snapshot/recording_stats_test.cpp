// The companion NAME.stats.json as the edge reads it: one name for the per-process cap
// (allowed_bytes), whichever recorder wrote the file.
#include "engine/snapshot/recording_stats.h"

#include <gtest/gtest.h>

#include "engine/core/error.h"
#include "engine/core/units.h"

namespace fragscope::snapshot {
namespace {

// gpt_oom_cap's recorder (record_torch_traces.py) capped the process at params.cap_gib = 6.
TEST(RecordingStats, FixtureRecordersCapIsReadAsAllowedBytes) {
  const nlohmann::json stats =
      read_recording_stats(std::string(FRAGSCOPE_FIXTURES) + "/gpt_oom_cap.stats.json");
  EXPECT_EQ(stats.at("params").at("cap_gib"), 6);
  EXPECT_EQ(stats.at("allowed_bytes").get<Bytes>(), 6 * kGiB);
}

TEST(RecordingStats, AllowedBytesWinsOverTheFixtureCap) {
  const nlohmann::json stats = parse_recording_stats(
      R"({"allowed_bytes": 2147483648, "params": {"cap_gib": 6}})", "both.stats.json");
  EXPECT_EQ(stats.at("allowed_bytes").get<Bytes>(), 2 * kGiB);
}

TEST(RecordingStats, NoCapOrNoCapAnyDeviceHasGivesNoAllowedBytes) {
  for (const char* text : {R"({"outcome": "ok"})", R"({"params": {"cap_gib": 0}})",
                           R"({"params": {"cap_gib": 1e300}})", R"({"params": {"cap_gib": "6"}})",
                           R"({"params": [6]})"})
    EXPECT_FALSE(parse_recording_stats(text, "x.stats.json").contains("allowed_bytes")) << text;
  // A fraction of a GiB is kept to the byte.
  EXPECT_EQ(parse_recording_stats(R"({"params": {"cap_gib": 0.5}})", "x.stats.json")
                .at("allowed_bytes")
                .get<Bytes>(),
            kGiB / 2);
}

TEST(RecordingStats, NotAnObjectIsAnInputErrorNamingTheFile) {
  try {
    parse_recording_stats("[1, 2]", "list.stats.json");
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("list.stats.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace fragscope::snapshot
