// Workload generator and experiment-runner throughput on the case-study model (Release build):
// targets are < 1 ms per simulated training step and < 5 s for a 100-point sweep on 2 cores.
#include <benchmark/benchmark.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "engine/workload/experiment.h"
#include "engine/workload/runner.h"

namespace {

using namespace fragscope;
using namespace fragscope::workload;

const ExperimentPoint& case_point(const std::string& name) {
  static const Experiment experiment = load_experiment(
      std::string(FRAGSCOPE_FIXTURES) + "/../../../experiments/case-study-1.2b-a100-40gb.json");
  for (const ExperimentPoint& p : experiment.points)
    if (p.name == name)
      return p;
  throw std::runtime_error("no variant " + name);
}

// Request-stream generation only, per training step of the 1.2B model.
void BM_WorkloadGenerateCaseStudyStep(benchmark::State& state) {
  Workload w = case_point("baseline-bs8").workload;
  w.training.steps = static_cast<int>(state.range(0));
  std::size_t requests = 0;
  for (auto _ : state) {
    const RequestStream s = generate(w);
    requests = s.requests.size();
    benchmark::DoNotOptimize(s.requests.data());
  }
  state.counters["steps"] = static_cast<double>(w.training.steps);
  state.counters["requests"] = static_cast<double>(requests);
  state.counters["us_per_step"] = benchmark::Counter(
      static_cast<double>(w.training.steps) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_WorkloadGenerateCaseStudyStep)->Arg(10)->Unit(benchmark::kMillisecond);

// Generation + the allocator model, per simulated training step (baseline and mitigated).
void BM_WorkloadSimulateCaseStudyStep(benchmark::State& state) {
  ExperimentPoint p = case_point(state.range(1) == 0 ? "baseline-bs8" : "mitigated");
  p.workload.training.steps = static_cast<int>(state.range(0));
  for (auto _ : state) {
    const PointResult r = run_point(p, false);
    benchmark::DoNotOptimize(r.peak_reserved);
  }
  const double steps = static_cast<double>(p.workload.training.steps);
  state.counters["ms_per_step"] =
      benchmark::Counter(steps * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetLabel(p.name);
}
BENCHMARK(BM_WorkloadSimulateCaseStudyStep)
    ->Args({10, 0})
    ->Args({10, 1})
    ->Unit(benchmark::kMillisecond);

// A 100-point sweep of the case study (batch sizes 1..25 × 4 variants, 3 steps each) on two
// worker threads, as `fragscope-cli run --threads 2` runs it (without storage).
void BM_WorkloadCaseStudySweep100(benchmark::State& state) {
  std::vector<ExperimentPoint> points;
  for (const char* name :
       {"baseline-bs8", "mitigated", "only-accumulation-4x4", "only-ffn-checkpointing"}) {
    for (int batch = 1; batch <= 25; ++batch) {
      ExperimentPoint p = case_point(name);
      p.workload.training.batch_size = batch;
      points.push_back(p);
    }
  }
  for (auto _ : state) {
    std::atomic<std::size_t> next{0};
    std::atomic<std::size_t> ooms{0};
    std::vector<std::thread> workers;
    for (int t = 0; t < 2; ++t) {
      workers.emplace_back([&] {
        for (std::size_t i = next++; i < points.size(); i = next++)
          if (run_point(points[i], false).oom)
            ++ooms;
      });
    }
    for (std::thread& t : workers)
      t.join();
    state.counters["ooms"] = static_cast<double>(ooms.load());
  }
  state.counters["points"] = static_cast<double>(points.size());
}
BENCHMARK(BM_WorkloadCaseStudySweep100)->Unit(benchmark::kMillisecond)->Iterations(2);

}  // namespace
