// run_point reports its run (alloc::kRunStages) growing to 1, and a cancel halfway stops it there.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/workload/experiment.h"
#include "engine/workload/runner.h"
#include "tests/progress_test_util.h"

namespace fragscope::workload {
namespace {

ExperimentPoint a_point() {
  const Experiment experiment = parse_experiment(nlohmann::json::parse(R"({
    "name": "t",
    "device": {"preset": "A100-40GB"},
    "model": {"kind": "gpt", "layers": 8, "hidden": 256, "heads": 4, "vocab": 1000},
    "training": {"batch_size": 2, "steps": 12, "seq_len": {"kind": "fixed", "value": 128}}
  })"),
                                                 "t.json");
  return experiment.points.front();
}

TEST(RunPoint, ProgressGrowsToOneAndACancelHalfwayStopsThere) {
  const ExperimentPoint point = a_point();
  fragscope::test::ProgressRecorder whole(alloc::kRunStages);
  const PointResult result = run_point(point, false, {}, whole.progress());
  ASSERT_GT(result.requests, 4 * alloc::kCancelPollRequests);
  EXPECT_TRUE(fragscope::test::grows_to_one(whole, 5));
  EXPECT_EQ(run_point(point, false).peak_reserved, result.peak_reserved);

  fragscope::test::ProgressRecorder halfway(alloc::kRunStages);
  halfway.cancel_at = 0.5;
  EXPECT_THROW(run_point(point, true, halfway.token, halfway.progress()), Cancelled);
  EXPECT_TRUE(fragscope::test::stopped_before(
      halfway, 0.5 + static_cast<double>(alloc::kCancelPollRequests) /
                         static_cast<double>(result.requests)));
}

}  // namespace
}  // namespace fragscope::workload
