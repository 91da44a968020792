// DistributedDataParallel's gradient buckets against real 2-rank DDP recordings (gloo, two
// processes on one H200, tests/fixtures/ddp-gloo-2.11-h200): per-rank peaks within 1 % allocated
// and 2 % reserved, the rebuilt buckets' sizes as recorded, and the rank that ran out of memory
// because its sequences were longer.
#include "engine/workload/ddp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/snapshot/snapshot.h"
#include "engine/workload/experiment.h"
#include "engine/workload/runner.h"
#include "recorded_runs.h"

namespace fragscope::workload {
namespace {

namespace fs = std::filesystem;
const fs::path kDdp = fs::path(FRAGSCOPE_FIXTURES).parent_path() / "ddp-gloo-2.11-h200";

const Experiment& ddp_experiment() {
  static const Experiment experiment = load_experiment(kDdp / "ddp-gloo-2.11-h200.json");
  return experiment;
}

const ExperimentPoint& point(const std::string& name) {
  return test::point_named({&ddp_experiment()}, name);
}

fs::path recording(const std::string& name, const std::string& suffix) {
  const std::string job = name.substr(0, name.rfind("_rank"));
  return kDdp / job / (name + suffix);
}

nlohmann::json stats_of(const std::string& name) {
  return test::read_json_file(recording(name, ".stats.json"));
}

TEST(DdpBuckets, AssignmentClosesABucketOnceItReachesTheLimit) {
  EXPECT_EQ(ddp_bucket_sizes({}, {10}), std::vector<Bytes>{});
  EXPECT_EQ(ddp_bucket_sizes({4, 4, 4, 4}, {10}), (std::vector<Bytes>{12, 4}));
  // The first limit once, then the last one for every later bucket.
  EXPECT_EQ(ddp_bucket_sizes({1, 3, 3, 3, 3, 9}, {1, 6}), (std::vector<Bytes>{1, 6, 6, 9}));
  EXPECT_EQ(ddp_bucket_sizes({5, 5}, {10}), (std::vector<Bytes>{10}));
}

TEST(DdpBuckets, DdpAndFsdpExcludeEachOther) {
  Workload w;
  w.parallel.ddp = true;
  w.parallel.fsdp_shards = 2;
  EXPECT_THROW(validate(w), InputError);
}

class DdpRank : public testing::TestWithParam<const char*> {};

TEST_P(DdpRank, PeaksMatchTheRanksMemoryStats) {
  const std::string name = GetParam();
  const nlohmann::json stats = stats_of(name);
  const PointResult r = run_point(point(name), false);
  test::expect_peaks_match(name, r, stats);
  const bool real_oom = test::recorded_oom(stats);
  EXPECT_EQ(r.oom, real_oom) << name;
  if (real_oom) {
    EXPECT_EQ(r.steps_completed, stats["steps_completed"].get<int>()) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(GlooOneGpu, DdpRank,
                         testing::Values("ddp_gloo_gpt_fixed_rank0", "ddp_gloo_gpt_fixed_rank1",
                                         "ddp_gloo_gpt_imbalance_rank1"));

// The buckets the model makes are the buffers the recording allocated: the initial single bucket,
// and after its free, the rebuilt buckets in gradient-ready order.
TEST(DdpBuckets, BucketAllocationsAreTheRecordedOnes) {
  const snapshot::Snapshot real =
      snapshot::read_snapshot(recording("ddp_gloo_gpt_fixed_rank0", ".pickle.gz"));
  const RequestStream modelled = generate(point("ddp_gloo_gpt_fixed_rank0").workload);
  std::vector<Bytes> model_buckets;
  for (const Request& request : modelled.requests) {
    if (request.op == RequestOp::malloc && request.label.value != 0 &&
        modelled.labels[request.label.value].op == std::string("ddp.bucket"))
      model_buckets.push_back(request.size);
  }
  ASSERT_GE(model_buckets.size(), 2u);
  // In the recording: the bucket is the allocation of every parameter's bytes; the rebuilt ones
  // follow its free.
  const auto& events = real.device_traces.at(0);
  const Bytes total = model_buckets.front();
  std::size_t freed = events.size();
  bool allocated = false;
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i].size != total)
      continue;
    if (events[i].action == TraceAction::alloc)
      allocated = true;
    if (events[i].action == TraceAction::free_requested) {
      freed = i;
      break;
    }
  }
  ASSERT_TRUE(allocated) << "no allocation of " << total << " bytes in the recording";
  ASSERT_LT(freed, events.size());
  std::vector<Bytes> recorded;
  for (std::size_t i = freed + 1; i < events.size() && recorded.size() + 1 < model_buckets.size();
       ++i) {
    if (events[i].action == TraceAction::alloc)
      recorded.push_back(events[i].size);
  }
  EXPECT_EQ(std::vector<Bytes>(model_buckets.begin() + 1, model_buckets.end()), recorded);
}

}  // namespace
}  // namespace fragscope::workload
