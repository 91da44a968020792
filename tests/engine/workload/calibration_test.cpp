// Calibration against the real PyTorch 2.11 recordings: the generated stream, run through the
// allocator model, must predict peak allocated within 1% and peak reserved within 2% of the real
// memory_stats(), and fail at the same request where the real run hit its OOM.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/snapshot/snapshot.h"
#include "engine/workload/experiment.h"
#include "engine/workload/runner.h"
#include "recorded_runs.h"

namespace fragscope::workload {
namespace {

const std::string kFixtures = FRAGSCOPE_FIXTURES;

const Experiment& calibration() {
  static const Experiment experiment = load_experiment(
      std::string(FRAGSCOPE_SOURCE_DIR) + "/experiments/calibration-torch-2.11-h200.json");
  return experiment;
}

const ExperimentPoint& point(const std::string& name) {
  return test::point_named({&calibration()}, name);
}

nlohmann::json real_stats(const std::string& name) {
  return test::read_json_file(kFixtures + "/" + name + ".stats.json");
}

class Calibration : public testing::TestWithParam<const char*> {};

TEST_P(Calibration, PeaksMatchRealMemoryStats) {
  const std::string name = GetParam();
  const nlohmann::json stats = real_stats(name);
  const PointResult r = run_point(point(name), false);
  test::expect_peaks_match(name, r, stats);
  EXPECT_EQ(r.oom, test::recorded_oom(stats)) << name;
}

INSTANTIATE_TEST_SUITE_P(TorchFixtures, Calibration,
                         testing::Values("gpt_fixedlen_default", "gpt_varlen_default",
                                         "gpt_varlen_expandable", "gpt_ckpt_accum", "gpt_oom_cap"));

TEST(CalibrationOom, FailsAtTheRecordedRequest) {
  const nlohmann::json stats = real_stats("gpt_oom_cap");
  const snapshot::Snapshot snapshot = snapshot::read_snapshot(kFixtures + "/gpt_oom_cap.pickle.gz");
  std::size_t allocs_before = 0;
  Bytes oom_size = 0;
  for (const TraceEvent& e : snapshot.device_traces.at(0)) {
    if (e.action == TraceAction::oom) {
      oom_size = e.size;
      break;
    }
    if (e.action == TraceAction::alloc)
      ++allocs_before;
  }
  ASSERT_GT(oom_size, 0U);
  const PointResult r = run_point(point("gpt_oom_cap"), false);
  ASSERT_TRUE(r.oom);
  ASSERT_TRUE(r.oom_info.has_value());
  EXPECT_EQ(r.oom_info->allocs_before, allocs_before);
  EXPECT_EQ(r.oom_info->oom.rounded_size, oom_size);
  // "Tried to allocate 168.00 MiB ... 6.00 GiB allowed" as in the recorded exception
  const std::string real = stats["outcome"].get<std::string>();
  EXPECT_NE(real.find("Tried to allocate 168.00 MiB"), std::string::npos);
  EXPECT_NE(r.oom_info->oom.message.find("Tried to allocate 168.00 MiB"), std::string::npos)
      << r.oom_info->oom.message;
  EXPECT_NE(r.oom_info->oom.message.find("6.00 GiB allowed"), std::string::npos);
  ASSERT_TRUE(r.oom_label.has_value());
  EXPECT_EQ(r.oom_label->op, "attn.scaled");
  // it fails inside a step; the steps before it completed
  EXPECT_GE(r.oom_step, 0);
  EXPECT_EQ(r.steps_completed, r.oom_step);
}

TEST(CalibrationSummary, JsonShape) {
  Workload w = point("gpt_fixedlen_default").workload;
  ExperimentPoint p = point("gpt_fixedlen_default");
  p.workload.training.steps = 2;
  const PointResult r = run_point(p, true);
  const nlohmann::json j = to_json(r);
  EXPECT_EQ(j["outcome"], "ok");
  EXPECT_TRUE(j["oom"].is_null());
  EXPECT_EQ(j["steps_completed"], 2);
  EXPECT_EQ(j["memory_stats"].size(), 122U);
  EXPECT_EQ(j["memory_stats"]["reserved_bytes.all.peak"], r.peak_reserved);
  EXPECT_EQ(r.events.size(), r.event_labels.size());
  EXPECT_FALSE(r.labels.empty());
}

}  // namespace
}  // namespace fragscope::workload
