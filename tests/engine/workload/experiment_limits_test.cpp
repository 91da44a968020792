// Hostile experiment files: deep nesting, long dotted overrides and points that copy a long
// string are refused with the file and the place, within bounded memory and stack.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/workload/experiment.h"

namespace fragscope::workload {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json minimal() {
  return json::parse(R"({
    "name": "t",
    "device": {"preset": "A100-40GB"},
    "model": {"kind": "gpt", "layers": 2, "hidden": 256, "heads": 4, "vocab": 1000},
    "training": {"batch_size": 2, "steps": 2, "seq_len": {"kind": "fixed", "value": 128}}
  })");
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

std::filesystem::path write_file(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path;
}

TEST(ExperimentLimits, DeeplyNestedFileIsRefusedAtParseTime) {
  const auto path = write_file("fragscope-deep-experiment.json",
                               "{\"name\": \"x\", \"model\": " + std::string(200'000, '[') +
                                   std::string(200'000, ']') + "}");
  EXPECT_THAT(error_of([&] { load_experiment(path); }),
              HasSubstr("fragscope-deep-experiment.json: line 1, column "));
  std::filesystem::remove(path);
}

TEST(ExperimentLimits, LongDottedOverrideIsRefused) {
  json d = minimal();
  std::string dotted = "training";
  for (int i = 0; i < 200'000; ++i)
    dotted += ".a";
  d["variants"] = json::array({{{"name", "v"}, {"set", {{dotted, 1}}}}});
  const std::string message = error_of([&] { parse_experiment(d, "x.json"); });
  EXPECT_THAT(message, HasSubstr("x.json: $.variants[0].set.\"training.a.a"));
  EXPECT_THAT(message, HasSubstr("more than 8 dotted segments"));
}

TEST(ExperimentLimits, PointsDoNotCopyTheDescription) {
  json d = minimal();
  d["description"] = std::string(1 << 20, 'd');
  d["sweep"] = json{{"training.batch_size", {1, 2, 3, 4}}};
  const Experiment e = parse_experiment(d, "x.json");
  ASSERT_EQ(e.points.size(), 4U);
  EXPECT_EQ(e.description.size(), 1U << 20);
  for (const auto& point : e.points)
    EXPECT_FALSE(point.config.contains("description"));
}

TEST(ExperimentLimits, PointsCopyingALongStringAreBounded) {
  // A 1 MiB string in the base configuration, copied into 1000 sweep points, would take 1 GiB.
  json d = minimal();
  d["name"] = std::string(1 << 20, 'm');
  std::vector<int> sizes;
  for (int i = 1; i <= 1000; ++i)
    sizes.push_back(i);
  d["sweep"] = json{{"training.batch_size", sizes}};
  const std::string message = error_of([&] { parse_experiment(d, "x.json"); });
  EXPECT_THAT(message, HasSubstr("x.json: $.sweep: the resolved points would take more than 256"));
}

TEST(ExperimentLimits, OutOfRangeNumberNamesTheFile) {
  const auto path = write_file("fragscope-1e400.json", "{\"name\": \"x\",\n \"seed\": 1e400}");
  EXPECT_THAT(
      error_of([&] { load_experiment(path); }),
      HasSubstr("fragscope-1e400.json: line 2, column 10: the number 1e400 is out of range"));
  std::filesystem::remove(path);
}

TEST(ExperimentMessages, IntegersAboveInt64AreQuotedAsWritten) {
  // 2^64 - 1 is unsigned in JSON; read as int64 it wrapped and the message said "got -1".
  json e = minimal();
  e["training"]["batch_size"] = std::numeric_limits<std::uint64_t>::max();
  const std::string err = error_of([&] { (void)parse_experiment(e, "huge.json"); });
  EXPECT_THAT(err, HasSubstr("huge.json"));
  EXPECT_THAT(err, HasSubstr("training.batch_size"));
  EXPECT_THAT(err, HasSubstr("got 18446744073709551615"));
  EXPECT_THAT(err, ::testing::Not(HasSubstr("got -1")));
  e["training"]["batch_size"] = std::uint64_t{1} << 63;
  EXPECT_THAT(error_of([&] { (void)parse_experiment(e, "huge.json"); }),
              HasSubstr("got 9223372036854775808"));
}

}  // namespace
}  // namespace fragscope::workload
