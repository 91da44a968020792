// PYTORCH_CUDA_ALLOC_CONF parsing and memory_summary() formatting (Release build). Both run once
// per imported run or what-if scenario, so they only need to stay far below a millisecond.
#include <benchmark/benchmark.h>

#include "engine/allocator/config.h"
#include "engine/allocator/summary.h"

namespace fragscope::alloc {
namespace {

void BM_ParseAllocConf(benchmark::State& state) {
  const std::string text =
      "max_split_size_mb:128,garbage_collection_threshold:0.8,expandable_segments:False,"
      "roundup_power2_divisions:[256:1,512:2,1024:4,>:8],release_lock_on_cudamalloc:True";
  for (auto _ : state)
    benchmark::DoNotOptimize(AllocatorConfig::parse(text));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_ParseAllocConf);

void BM_CanonicalAllocConf(benchmark::State& state) {
  const AllocatorConfig config = AllocatorConfig::parse(
      "max_split_size_mb:128,roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]");
  for (auto _ : state)
    benchmark::DoNotOptimize(to_alloc_conf_string(config));
}
BENCHMARK(BM_CanonicalAllocConf);

void BM_MemorySummary(benchmark::State& state) {
  DeviceStats stats;
  stats.allocated_bytes[StatType::aggregate].increase(6'223'036'416);
  stats.allocated_bytes[StatType::large_pool].increase(6'223'036'416);
  stats.allocation[StatType::aggregate].increase(7323);
  stats.allocation[StatType::large_pool].increase(7323);
  for (auto _ : state)
    benchmark::DoNotOptimize(memory_summary(stats, 0, false));
}
BENCHMARK(BM_MemorySummary);

}  // namespace
}  // namespace fragscope::alloc
