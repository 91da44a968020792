// The case-study preset: the outcomes are computed by the simulation (the preset asserts none);
// this test checks that what it computes is the physical story of workload-model.md §7.
#include <gtest/gtest.h>

#include "engine/workload/experiment.h"
#include "engine/workload/runner.h"

namespace fragscope::workload {
namespace {

const Experiment& case_study() {
  static const Experiment experiment = load_experiment(
      std::string(FRAGSCOPE_SOURCE_DIR) + "/experiments/case-study-1.2b-a100-40gb.json");
  return experiment;
}

PointResult run(const std::string& name) {
  for (const ExperimentPoint& p : case_study().points)
    if (p.name == name)
      return run_point(p, false);
  throw std::runtime_error("no variant " + name);
}

TEST(CaseStudy, PresetHasThePhysicalDims) {
  const ExperimentPoint& p = case_study().points.at(0);
  EXPECT_EQ(parameter_count(p.workload.model), 1213005824U);
  EXPECT_EQ(p.device.name, "A100-40GB");
  // 39.59 GiB total minus the 600 MiB context reserve: 39.0 GiB, the measurements' cap
  EXPECT_NEAR(static_cast<double>(p.device.capacity) / static_cast<double>(kGiB), 39.0, 0.001);
}

TEST(CaseStudy, Bs8FitsBs16OomsMitigatedFitsMuchLower) {
  const PointResult bs8 = run("baseline-bs8");
  const PointResult bs16 = run("baseline-bs16");
  const PointResult mitigated = run("mitigated");
  EXPECT_FALSE(bs8.oom);
  ASSERT_TRUE(bs16.oom);
  EXPECT_FALSE(mitigated.oom);
  // a capacity OOM at the fp32 copy of the logits: 16 × 1024 × 50304 × 4 bytes
  ASSERT_TRUE(bs16.oom_info.has_value());
  EXPECT_EQ(bs16.oom_info->oom.requested, Bytes{16} * 1024 * 50304 * 4);
  EXPECT_LT(static_cast<double>(mitigated.peak_allocated),
            0.8 * static_cast<double>(bs8.peak_allocated));
  // the simulated peaks are within 3% of the note's measurements (36.15 GB, 26.47 GB)
  EXPECT_NEAR(static_cast<double>(bs8.peak_allocated) / 36.15e9, 1.0, 0.03);
  EXPECT_NEAR(static_cast<double>(mitigated.peak_allocated) / 26.47e9, 1.0, 0.03);
  // recompute and accumulation cost time
  EXPECT_GT(mitigated.estimated_step_time_ratio, 1.1);
}

}  // namespace
}  // namespace fragscope::workload
