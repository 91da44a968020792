// The case-study preset: the outcomes are computed by the simulation (the preset asserts none);
// this test checks that what it computes is the physical story of workload-model.md §7.
#include <gtest/gtest.h>

#include <fstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "engine/snapshot/snapshot.h"

#include "engine/workload/experiment.h"
#include "engine/workload/runner.h"

namespace fragscope::workload {
namespace {

const Experiment& case_study() {
  static const Experiment experiment = load_experiment(
      std::string(FRAGSCOPE_SOURCE_DIR) + "/experiments/case-study-1.2b-a100-40gb.json");
  return experiment;
}

const Training& run_point_config(const std::string& name) {
  for (const ExperimentPoint& p : case_study().points)
    if (p.name == name)
      return p.workload.training;
  throw std::runtime_error("no variant " + name);
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

// The recorded events say where each optimizer step begins (the Compare page lines runs up by
// step with them): one entry per step the run reached, each an allocation, in order.
TEST(CaseStudy, StepFirstEventsOpenEveryReachedStep) {
  for (const char* name : {"baseline-bs8", "baseline-bs16"}) {
    for (const ExperimentPoint& p : case_study().points) {
      if (p.name != name)
        continue;
      const PointResult r = run_point(p, true);
      const std::size_t reached = r.oom ? static_cast<std::size_t>(r.oom_step + 1)
                                        : static_cast<std::size_t>(p.workload.training.steps);
      ASSERT_EQ(r.step_first_events.size(), reached) << name;
      for (std::size_t k = 0; k < r.step_first_events.size(); ++k) {
        ASSERT_LT(r.step_first_events[k], r.events.size()) << name;
        EXPECT_EQ(r.events[r.step_first_events[k]].action, TraceAction::alloc) << name;
        if (k > 0) {
          EXPECT_LT(r.step_first_events[k - 1], r.step_first_events[k]) << name;
        }
      }
      // Without the events there is nothing to index.
      EXPECT_TRUE(run_point(p, false).step_first_events.empty()) << name;
    }
  }
}

const std::string kTurn2 =
    std::string(FRAGSCOPE_SOURCE_DIR) + "/tests/fixtures/torch-2.11-h200-turn2";

// allocated and reserved bytes when the recorded OOM happened, and the failing request's size,
// summed from the recorded trace (history from torch.cuda.init()).
struct RecordedOomState {
  Bytes allocated = 0, reserved = 0, request = 0;
};
RecordedOomState recorded_oom(const std::string& pickle) {
  const snapshot::Snapshot snap = snapshot::read_snapshot(pickle);
  RecordedOomState s;
  std::unordered_map<std::uint64_t, Bytes> live;
  for (const TraceEvent& e : snap.device_traces.at(0)) {
    switch (e.action) {
      case TraceAction::alloc:
        live[e.addr] = e.size;
        s.allocated += e.size;
        break;
      case TraceAction::free_completed:
        s.allocated -= live[e.addr];
        live.erase(e.addr);
        break;
      case TraceAction::segment_alloc:
        s.reserved += e.size;
        break;
      case TraceAction::segment_free:
        s.reserved -= e.size;
        break;
      case TraceAction::oom:
        s.request = e.size;
        return s;
      default:
        break;
    }
  }
  return s;
}

// Fixed length 1024, batch 16: a capacity OOM — what is allocated plus the request exceeds the
// device, whatever the layout.
TEST(CaseStudyStories, FixedLengthBatch16IsACapacityOom) {
  const PointResult bs16 = run("baseline-bs16");
  ASSERT_TRUE(bs16.oom);
  ASSERT_TRUE(bs16.oom_info.has_value());
  const alloc::OutOfMemory& oom = bs16.oom_info->oom;
  const Bytes capacity = case_study().points.at(0).device.capacity;
  EXPECT_GT(oom.allocated + oom.rounded_size, capacity);
}

// Variable lengths, batch 6: a fragmentation OOM at the recorded step, asking the recorded size,
// with the recorded allocated bytes and about the recorded reserved-but-unallocated bytes
// (cs_varlen_bs6_default: 1.82 GiB asked, 36.07 GiB allocated, 1.93 GiB reserved but unallocated).
TEST(CaseStudyStories, VariableLengthBatch6IsAFragmentationOomAsRecorded) {
  const RecordedOomState real = recorded_oom(kTurn2 + "/cs_varlen_bs6_default.pickle.gz");
  ASSERT_GT(real.request, 0U);
  std::ifstream in(kTurn2 + "/cs_varlen_bs6_default.stats.json");
  const nlohmann::json stats = nlohmann::json::parse(in);
  const PointResult r = run("varlen-bs6");
  ASSERT_TRUE(r.oom);
  ASSERT_TRUE(r.oom_info.has_value());
  const alloc::OutOfMemory& oom = r.oom_info->oom;
  EXPECT_EQ(oom.rounded_size, real.request);
  // the recording completed every step before the failing one (steps are 0-based)
  std::size_t completed = 0;
  for (const nlohmann::json& s : stats["steps"])
    completed = std::max<std::size_t>(completed, s["step"].get<std::size_t>() + 1);
  EXPECT_EQ(static_cast<std::size_t>(r.oom_step), completed);
  EXPECT_NEAR(static_cast<double>(oom.allocated) / static_cast<double>(real.allocated), 1.0, 0.01);
  const double real_unallocated = static_cast<double>(real.reserved - real.allocated);
  const double unallocated = static_cast<double>(oom.reserved - oom.allocated);
  EXPECT_NEAR(unallocated / real_unallocated, 1.0, 0.1);
  // fragmentation, not capacity: without the holes it would have fitted
  const Bytes capacity = case_study().points.at(0).device.capacity;
  EXPECT_LE(oom.allocated + oom.rounded_size, capacity);
  EXPECT_GE(oom.reserved - oom.allocated, oom.rounded_size);
  // the lengths are the recording's
  const std::vector<MicroBatch> shapes = micro_batches(run_point_config("varlen-bs6"));
  for (std::size_t i = 0; i < stats["micro_batches"].size(); ++i)
    EXPECT_EQ(shapes.at(i).seq_len, stats["micro_batches"][i]["seq_len"].get<int>()) << i;
  std::cout << "varlen-bs6: OOM at step " << r.oom_step << " asking " << oom.rounded_size
            << " B with " << oom.allocated << " B allocated (recorded " << real.allocated << "), "
            << oom.reserved - oom.allocated << " B reserved but unallocated (recorded "
            << real.reserved - real.allocated << ")\n";
}

// What the GPU showed for the same workload: expandable segments fit, max_split_size_mb:128 still
// fails, batch 5 fits.
TEST(CaseStudyStories, MitigationsOfTheFragmentationOom) {
  EXPECT_FALSE(run("varlen-bs6-expandable").oom);
  EXPECT_TRUE(run("varlen-bs6-split128").oom);
  EXPECT_FALSE(run("varlen-bs5").oom);
}

}  // namespace
}  // namespace fragscope::workload
