// Experiment files: decoding, variants, sweeps, and errors that name the JSON path.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/workload/experiment.h"

namespace fragscope::workload {
namespace {

using nlohmann::json;

json minimal() {
  return json::parse(R"({
    "name": "t",
    "device": {"preset": "A100-40GB"},
    "model": {"kind": "gpt", "layers": 2, "hidden": 256, "heads": 4, "vocab": 1000},
    "training": {"batch_size": 2, "steps": 2, "seq_len": {"kind": "fixed", "value": 128}}
  })");
}

std::string error_of(const json& document) {
  try {
    parse_experiment(document, "x.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Experiment, MinimalFileIsOnePoint) {
  const Experiment e = parse_experiment(minimal(), "x.json");
  ASSERT_EQ(e.points.size(), 1U);
  EXPECT_EQ(e.points[0].name, "base");
  EXPECT_EQ(e.points[0].workload.model.layers, 2);
  EXPECT_EQ(e.points[0].device.total_memory, 42505273344ULL);
  EXPECT_EQ(e.points[0].device.capacity, 42505273344ULL - kDefaultContextReserve);
  // 39.0 GiB for the allocator, the cap of the case-study measurements
  EXPECT_NEAR(static_cast<double>(e.points[0].device.capacity) / static_cast<double>(kGiB), 39.0,
              0.001);
}

TEST(Experiment, UnknownKeySuggestsTheNearestOne) {
  json d = minimal();
  d["training"]["bach_size"] = 4;
  const std::string message = error_of(d);
  EXPECT_NE(message.find("x.json: $.training.bach_size: unknown key"), std::string::npos)
      << message;
  EXPECT_NE(message.find("did you mean \"batch_size\""), std::string::npos) << message;
}

TEST(Experiment, WrongTypeAndRangeNameThePath) {
  json d = minimal();
  d["training"]["batch_size"] = "8";
  EXPECT_NE(error_of(d).find("$.training.batch_size: expected an integer"), std::string::npos);
  d = minimal();
  d["training"]["batch_size"] = -4;
  EXPECT_NE(error_of(d).find("$.training.batch_size: expected an integer in [1"), std::string::npos)
      << error_of(d);
  d = minimal();
  d["model"]["attention"] = "flash";
  EXPECT_NE(error_of(d).find("$.model.attention: expected one of eager, sdpa"), std::string::npos);
  d = minimal();
  d["model"]["heads"] = 3;
  EXPECT_NE(error_of(d).find("$.model.heads: must divide hidden"), std::string::npos);
  d = minimal();
  d["device"] = json{{"preset", "A100-41GB"}};
  EXPECT_NE(error_of(d).find("unknown device \"A100-41GB\""), std::string::npos);
  d = minimal();
  d["training"]["seq_len"] = json{{"kind", "lognormal"}, {"min", 100}, {"max", 50}};
  EXPECT_NE(error_of(d).find("$.training.seq_len.max: must be >= min"), std::string::npos);
  d = minimal();
  d["training"]["compile"] = json{{"attention", true}};
  EXPECT_NE(error_of(d).find("compiling eager attention is not modelled"), std::string::npos);
}

TEST(Experiment, VariantsOverrideDottedKeysAndAreValidated) {
  json d = minimal();
  d["variants"] =
      json::array({json{{"name", "bs16"}, {"set", {{"training.batch_size", 16}}}},
                   json{{"name", "capped"}, {"set", {{"device.capacity_bytes", 1 << 30}}}}});
  const Experiment e = parse_experiment(d, "x.json");
  ASSERT_EQ(e.points.size(), 2U);
  EXPECT_EQ(e.points[0].workload.training.batch_size, 16);
  EXPECT_EQ(e.points[1].device.capacity, Bytes{1} << 30);
  EXPECT_EQ(e.points[1].config["device"].count("preset"), 0U);
  d["variants"][0]["set"] = json{{"training.batch_sise", 16}};
  const std::string message = error_of(d);
  EXPECT_NE(message.find("variant \"bs16\": $.training.batch_sise: unknown key"), std::string::npos)
      << message;
  d["variants"][0]["set"] = json{{"batch_size", 16}};
  EXPECT_NE(error_of(d).find("expected a dotted key"), std::string::npos);
}

TEST(Experiment, SweepIsTheCartesianProduct) {
  json d = minimal();
  d["sweep"] = json{{"training.batch_size", {1, 2, 4}}, {"model.layers", {1, 2}}};
  const Experiment e = parse_experiment(d, "x.json");
  ASSERT_EQ(e.points.size(), 6U);
  std::set<std::pair<int, int>> seen;
  for (const ExperimentPoint& p : e.points) {
    seen.emplace(p.workload.training.batch_size, p.workload.model.layers);
    EXPECT_EQ(p.name.rfind("sweep:", 0), 0U);
  }
  EXPECT_EQ(seen.size(), 6U);
}

TEST(Experiment, EveryShippedFileParses) {
  const std::filesystem::path dir = std::filesystem::path(FRAGSCOPE_SOURCE_DIR) / "experiments";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json")
      continue;
    ++files;
    const Experiment e = load_experiment(entry.path());
    EXPECT_FALSE(e.points.empty()) << entry.path();
    for (const ExperimentPoint& p : e.points)
      EXPECT_NO_THROW(validate(p.workload)) << entry.path() << " " << p.name;
  }
  EXPECT_GE(files, 1);
}

TEST(Experiment, MalformedFileNamesIt) {
  const auto path = std::filesystem::temp_directory_path() / "fragscope-bad-experiment.json";
  {
    std::ofstream out(path);
    out << "{ \"name\": ";
  }
  try {
    load_experiment(path);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("fragscope-bad-experiment.json: not valid JSON"),
              std::string::npos);
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace fragscope::workload
