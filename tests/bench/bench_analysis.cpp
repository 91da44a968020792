// What-if throughput: a 100-configuration sweep over a 100k-entry real PyTorch trace on one and
// two threads (#19's target: < 0.3 s wall with two threads, Release), and the metrics pass over
// the same trace.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <chrono>
#include <string>
#include <vector>

#include "engine/analysis/metrics.h"
#include "engine/analysis/trace_requests.h"
#include "engine/analysis/what_if.h"
#include "engine/snapshot/snapshot.h"

namespace {

using namespace fragscope;

constexpr std::size_t kTraceEntries = 100'000;

struct SweepInput {
  std::vector<TraceEvent> events;  // the first kTraceEntries entries of gpt_ckpt_accum
  analysis::TraceRequests requests;
  alloc::AllocatorConfig config;
};

const SweepInput& input() {
  static const SweepInput in = [] {
    SweepInput s;
    const auto snap =
        snapshot::read_snapshot(std::string(FRAGSCOPE_FIXTURES) + "/gpt_ckpt_accum.pickle.gz");
    const auto& trace = snap.device_traces.at(0);
    s.events.assign(trace.begin(), trace.begin() + static_cast<std::ptrdiff_t>(
                                                       std::min(kTraceEntries, trace.size())));
    s.requests = analysis::requests_from_trace(s.events, snapshot::SegmentState{});
    s.config = analysis::config_from_settings(snap.allocator_settings);
    return s;
  }();
  return in;
}

// 2 (expandable) x 5 (max_split_size_mb) x 5 (roundup_power2_divisions) x 2 (GC threshold).
std::vector<analysis::Mitigation> hundred_configs() {
  std::vector<analysis::Mitigation> out;
  for (const bool expandable : {false, true})
    for (const Bytes split_mb : {0, 64, 128, 256, 512})
      for (const std::uint64_t divisions : {0, 2, 4, 8, 16})
        for (const double gc : {0.0, 0.8}) {
          analysis::Mitigation m;
          m.config.expandable_segments = expandable;
          if (split_mb != 0)
            m.config.max_split_size = split_mb * kMiB;
          m.config.roundup_power2_divisions.fill(divisions);
          m.config.garbage_collection_threshold = gc;
          m.config.raw = alloc::to_alloc_conf_string(m.config);
          m.name = m.config.raw;
          out.push_back(std::move(m));
        }
  return out;
}

// CPU seconds this process has used, all threads (Google Benchmark's CPU time is the main
// thread's alone).
double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// cores_used = the process's CPU time over the wall time: about 2 with two threads on two idle
// cores. On a shared machine the scheduler gives each session (autogroup) an equal share, so
// with four busy sessions on two cores it stays near 0.5 whatever the thread count: that, not
// the sweep, is why a second thread gave nothing under load. process_cpu_ms is the sweep's CPU
// time, all threads.
void BM_WhatIfSweep100Configs(benchmark::State& state) {
  const SweepInput& in = input();
  const auto configs = hundred_configs();
  analysis::WhatIfOptions options;
  options.threads = static_cast<unsigned>(state.range(0));
  options.capacity = Bytes{6} << 30;  // a limit, so the GC threshold takes part
  std::size_t rows = 0;
  const double cpu_before = process_cpu_seconds();
  const auto wall_before = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const auto table = analysis::run_what_if(in.requests.requests, configs, options);
    rows += table.rows.size();
    benchmark::DoNotOptimize(table.rows.data());
  }
  const double cpu = process_cpu_seconds() - cpu_before;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_before).count();
  state.counters["process_cpu_ms"] = 1e3 * cpu / static_cast<double>(state.iterations());
  state.counters["cores_used"] = wall > 0 ? cpu / wall : 0;
  state.counters["configs"] = static_cast<double>(configs.size());
  state.counters["trace_entries"] = static_cast<double>(in.events.size());
  state.counters["requests"] = static_cast<double>(in.requests.requests.requests.size());
  state.SetItemsProcessed(static_cast<std::int64_t>(rows * in.events.size()));
}
BENCHMARK(BM_WhatIfSweep100Configs)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_MetricsPass(benchmark::State& state) {
  const SweepInput& in = input();
  for (auto _ : state) {
    const auto metrics = analysis::measure_trace(in.events, snapshot::SegmentState{},
                                                 {.keep_samples = false, .buckets = 0});
    benchmark::DoNotOptimize(metrics.peak.reserved);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * in.events.size()));
}
BENCHMARK(BM_MetricsPass)->Unit(benchmark::kMillisecond);

}  // namespace
