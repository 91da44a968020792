// Replay throughput of the caching-allocator model over the real PyTorch fixtures: trace entries
// per second (items_per_second), the model's hot path (requests already extracted) and the
// whole replay (extraction + model + comparison).
#include <benchmark/benchmark.h>

#include <map>
#include <string>

#include "engine/allocator/run.h"
#include "engine/replay/replay.h"
#include "engine/snapshot/snapshot.h"

namespace {

using namespace fragscope;

const char* const kFixtureNames[] = {
    "gpt_ckpt_accum",        "gpt_fixedlen_default", "gpt_oom_cap",           "gpt_varlen_default",
    "gpt_varlen_expandable", "random_default",       "random_split64_round4", "streams_default"};

struct Fixture {
  snapshot::Snapshot snapshot;
  snapshot::Snapshot spooled;  // as the CLI reads it (read_snapshot_spooled)
  replay::TraceRequests requests;
  alloc::AllocatorConfig config;
  std::optional<Bytes> allowed;
};

const Fixture& fixture(const std::string& name) {
  static std::map<std::string, Fixture> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    Fixture f;
    f.snapshot =
        snapshot::read_snapshot(std::string(FRAGSCOPE_FIXTURES) + "/" + name + ".pickle.gz");
    f.spooled = snapshot::read_snapshot_spooled(std::string(FRAGSCOPE_FIXTURES) + "/" + name +
                                                ".pickle.gz");
    f.requests = replay::requests_from_trace(f.snapshot.device_traces.at(0));
    f.config = replay::config_from_settings(f.snapshot.allocator_settings);
    if (name == "gpt_oom_cap")
      f.allowed = Bytes{6} << 30;  // the recorded cap_gib
    it = cache.emplace(name, std::move(f)).first;
  }
  return it->second;
}

// The model alone: run_requests over the extracted request stream, recorded addresses.
void BM_ModelReplay(benchmark::State& state, const char* name) {
  const Fixture& f = fixture(name);
  alloc::RunOptions options;
  options.stop_on_oom = false;
  options.allowed_memory = f.allowed;
  for (auto _ : state) {
    alloc::ReplayDevice gpu(f.requests.segments, alloc::kUnlimited, kH200TotalMemory);
    auto result =
        alloc::run_requests(f.requests.requests, f.config, gpu.device(), nullptr, options);
    benchmark::DoNotOptimize(result.stats);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(f.requests.entries));
}

// A whole replay (extraction, model, comparison) of a trace already read, in memory
// (read_snapshot) or spooled (read_snapshot_spooled): the latter is what `fragscope-cli replay`
// does after reading the file.
void full_replay(benchmark::State& state, const Fixture& f, const snapshot::Snapshot& snapshot) {
  replay::ReplayOptions options;
  options.allowed_memory = f.allowed;
  for (auto _ : state) {
    auto result = replay::replay_snapshot(snapshot, options);
    benchmark::DoNotOptimize(result.first_divergence);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(f.requests.entries));
}

void BM_FullReplay(benchmark::State& state, const char* name) {
  const Fixture& f = fixture(name);
  full_replay(state, f, f.snapshot);
}

void BM_FullReplaySpooled(benchmark::State& state, const char* name) {
  const Fixture& f = fixture(name);
  full_replay(state, f, f.spooled);
}

const bool kRegistered = [] {
  for (const char* name : kFixtureNames) {
    benchmark::RegisterBenchmark((std::string("BM_ModelReplay/") + name).c_str(), BM_ModelReplay,
                                 name)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("BM_FullReplay/") + name).c_str(), BM_FullReplay,
                                 name)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("BM_FullReplaySpooled/") + name).c_str(),
                                 BM_FullReplaySpooled, name)
        ->Unit(benchmark::kMillisecond);
  }
  return true;
}();

}  // namespace
