// Snapshot import benchmarks: parse, timeline, writer. BM_LargeSnapshot reads the file named by
// FRAGSCOPE_LARGE_SNAPSHOT (tests/snapshot_tools/gen_large_snapshot.py writes a 1.2M-entry one);
// tests/snapshot_tools/compare_with_python.sh runs it beside python3's pickle.load.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/snapshot/pickle_writer.h"
#include "engine/snapshot/snapshot.h"
#include "engine/snapshot/timeline.h"

namespace {
using namespace fragscope::snapshot;

std::filesystem::path fixture_path(const char* name) {
  return std::filesystem::path(FRAGSCOPE_FIXTURES) / (std::string(name) + ".pickle.gz");
}

void BM_ReadFixture(benchmark::State& state) {
  auto path = fixture_path("gpt_ckpt_accum");
  std::size_t entries = 0;
  for (auto _ : state) {
    Snapshot s = read_snapshot(path);
    entries = s.trace_entry_count();
    benchmark::DoNotOptimize(s);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * entries));
}
BENCHMARK(BM_ReadFixture)->Unit(benchmark::kMillisecond);

void BM_TimelineFixture(benchmark::State& state) {
  Snapshot s = read_snapshot(fixture_path("gpt_ckpt_accum"));
  for (auto _ : state) {
    Timeline tl = build_timeline(s, 0);
    benchmark::DoNotOptimize(tl);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * s.trace_entry_count()));
}
BENCHMARK(BM_TimelineFixture)->Unit(benchmark::kMillisecond);

void BM_WriteFixture(benchmark::State& state) {
  Snapshot s = read_snapshot(fixture_path("gpt_varlen_default"));
  std::size_t bytes = 0;
  for (auto _ : state) {
    std::string out = write_snapshot_pickle(s);
    bytes = out.size();
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_WriteFixture)->Unit(benchmark::kMillisecond);

// A pickle shaped like a real trace recorded with C++ stacks (PyTorch 2.11, the 195 MB file of
// #19): every entry a new dict with its own new frames list of 64 GETs of ~500 frame dicts
// memoized long before, and a new 'N/A' compile_context string. The reader's GET path, the memo's
// folded slots and the frames-list interning are most of reading such a file.
std::string cpp_stack_trace_pickle(std::size_t entries) {
  std::string p = "\x80\x04";
  std::uint32_t memo = 0;
  auto memoize = [&] {
    p += '\x94';
    return memo++;
  };
  auto get = [&](std::uint32_t slot) {
    p += 'j';
    p.append(reinterpret_cast<const char*>(&slot), 4);
  };
  auto str = [&](std::string_view s) {
    p += '\x8c';
    p += static_cast<char>(s.size());
    p += s;
    return memoize();
  };
  auto integer = [&](std::uint64_t v) {
    p += "\x8a\x08";
    p.append(reinterpret_cast<const char*>(&v), 8);
  };
  p += '}';
  memoize();
  p += '(';
  str("segments");
  p += ']';
  memoize();
  str("device_traces");
  p += ']';
  memoize();
  p += ']';
  memoize();
  auto key = [&](std::string_view s) {  // memoized, then popped: only GETs use it
    const std::uint32_t slot = str(s);
    p += '0';
    return slot;
  };
  const std::uint32_t k_action = key("action"), k_addr = key("addr"), k_size = key("size"),
                      k_stream = key("stream"), k_time = key("time_us"),
                      k_context = key("compile_context"), k_frames = key("frames"),
                      k_filename = key("filename"), k_line = key("line"), k_name = key("name");
  const std::uint32_t alloc = key("alloc"), free_completed = key("free_completed");
  std::vector<std::uint32_t> frames;
  for (std::size_t e = 0; e < entries; ++e) {
    if (e % 1000 == 0)
      p += '(';
    p += '}';
    memoize();
    p += '(';
    get(k_action);
    get(e % 2 == 0 ? alloc : free_completed);
    get(k_addr);
    integer(0x7f0000000000 + (e / 2) * 512);
    get(k_size);
    integer(512);
    get(k_stream);
    integer(0);
    get(k_time);
    integer(1'700'000'000'000'000 + e);
    get(k_context);
    str("N/A");
    get(k_frames);
    p += ']';
    memoize();
    p += '(';
    for (std::size_t f = 0; f < 64; ++f) {
      const std::size_t which = (e * 7 + f * 13) % 500;
      if (which < frames.size()) {
        get(frames[which]);
        continue;
      }
      while (frames.size() <= which) {  // a frame dict, memoized on first use
        p += '}';
        frames.push_back(memoize());
        p += '(';
        get(k_filename);
        str("/src/model/layer_" + std::to_string(frames.size() % 7) + ".cpp");
        get(k_line);
        integer(frames.size());
        get(k_name);
        str("fn_" + std::to_string(frames.size()));
        p += 'u';
        if (frames.size() <= which)
          p += '0';  // dropped: only the last one is this list's item
      }
    }
    p += "eu";  // APPENDS the frames, SETITEMS the entry
    if (e % 1000 == 999 || e + 1 == entries)
      p += 'e';
  }
  p += "au.";  // the trace list into device_traces, SETITEMS of the root, STOP
  return p;
}

void BM_ReadCppStackTrace(benchmark::State& state) {
  const std::string pickle = cpp_stack_trace_pickle(static_cast<std::size_t>(state.range(0)));
  const auto bytes = std::span(reinterpret_cast<const std::uint8_t*>(pickle.data()), pickle.size());
  for (auto _ : state) {
    Snapshot s = read_snapshot_spooled_from_memory(bytes, "cpp_stacks");
    benchmark::DoNotOptimize(s);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * state.range(0)));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * pickle.size()));
}
BENCHMARK(BM_ReadCppStackTrace)->Arg(100'000)->Unit(benchmark::kMillisecond);

// Parse + timeline of one large file, once: the figure compared with python3's pickle.load.
void BM_LargeSnapshot(benchmark::State& state) {
  const char* path = std::getenv("FRAGSCOPE_LARGE_SNAPSHOT");
  if (path == nullptr || !std::filesystem::exists(path)) {
    state.SkipWithError("set FRAGSCOPE_LARGE_SNAPSHOT to a snapshot file");
    return;
  }
  for (auto _ : state) {
    Snapshot s = read_snapshot(path);
    Timeline tl = build_timeline(s, 0);
    benchmark::DoNotOptimize(tl);
    state.counters["entries"] = static_cast<double>(s.trace_entry_count());
    state.counters["peak_allocated"] = static_cast<double>(tl.peak.allocated);
  }
}
BENCHMARK(BM_LargeSnapshot)->Unit(benchmark::kMillisecond)->Iterations(1);

// The same as `fragscope-cli info` reads it: spooled, the timeline without its samples.
void BM_LargeSnapshotSpooled(benchmark::State& state) {
  const char* path = std::getenv("FRAGSCOPE_LARGE_SNAPSHOT");
  if (path == nullptr || !std::filesystem::exists(path)) {
    state.SkipWithError("set FRAGSCOPE_LARGE_SNAPSHOT to a snapshot file");
    return;
  }
  TimelineSinks sinks;
  sinks.on_samples = [](std::span<const fragscope::TraceEvent>,
                        std::span<const fragscope::MemorySample>, std::size_t) {};
  for (auto _ : state) {
    Snapshot s = read_snapshot_spooled(path);
    Timeline tl = build_timeline(s, static_cast<int>(s.busiest_device()), sinks);
    benchmark::DoNotOptimize(tl);
    state.counters["entries"] = static_cast<double>(s.trace_entry_count());
  }
}
BENCHMARK(BM_LargeSnapshotSpooled)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
