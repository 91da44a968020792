// memory_summary(), format_size and the OOM texts against PyTorch 2.11's real output
// (torch-allocator-spec §6, §9.4, §12, golden vectors G2 and G7, the H200 recordings).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "engine/allocator/summary.h"
#include "engine/core/devices.h"
#include "engine/core/trace.h"
#include "engine/replay/replay.h"
#include "engine/snapshot/snapshot.h"

namespace fragscope::alloc {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::json read_json(const std::filesystem::path& path) {
  return nlohmann::json::parse(read_file(path));
}

// Adds `amount` to a pool entry and to "all", as the allocator does.
void add(StatArray& array, StatType pool, std::int64_t amount) {
  array[StatType::aggregate].increase(amount);
  array[pool].increase(amount);
}
void remove(StatArray& array, StatType pool, std::int64_t amount) {
  array[StatType::aggregate].decrease(amount);
  array[pool].decrease(amount);
}

// Golden vector G2 (large pool) replayed by hand: the stats behind the §9.4 example table.
DeviceStats g2_stats() {
  DeviceStats stats;
  constexpr StatType large = StatType::large_pool;
  const std::int64_t blocks[] = {1'049'088,  5'242'880,  9'961'472,  4'718'080,
                                 10'485'760, 10'486'272, 27'262'976, 8'388'608};
  const std::int64_t requests[] = {1'048'577,  5'242'880,  9'961'472,  4'194'304,
                                   10'485'760, 10'485'761, 26'215'400, 8'388'608};
  const std::int64_t segments[] = {20 * 1048576, 10 * 1048576, 12 * 1048576, 26 * 1048576};
  for (std::int64_t bytes : segments) {
    add(stats.segment, large, 1);
    add(stats.reserved_bytes, large, bytes);
  }
  for (int i = 0; i < 8; ++i) {
    if (i == 7) {  // the 10 MiB block is freed before the 8 MiB request reuses its segment
      remove(stats.allocation, large, 1);
      remove(stats.active, large, 1);
      remove(stats.allocated_bytes, large, blocks[4]);
      remove(stats.active_bytes, large, blocks[4]);
      remove(stats.requested_bytes, large, requests[4]);
    }
    add(stats.allocation, large, 1);
    add(stats.active, large, 1);
    add(stats.allocated_bytes, large, blocks[i]);
    add(stats.active_bytes, large, blocks[i]);
    add(stats.requested_bytes, large, requests[i]);
  }
  // Split remainders: S0's 19,922,432 shrinks to nothing, S2 and S1 leave 2,096,640 and 2 MiB.
  add(stats.inactive_split, large, 1);
  add(stats.inactive_split_bytes, large, 19'922'432);
  remove(stats.inactive_split_bytes, large, 5'242'880);
  remove(stats.inactive_split_bytes, large, 9'961'472);
  remove(stats.inactive_split_bytes, large, 4'718'080);
  remove(stats.inactive_split, large, 1);
  add(stats.inactive_split, large, 1);
  add(stats.inactive_split_bytes, large, 2'096'640);
  add(stats.inactive_split, large, 1);
  add(stats.inactive_split_bytes, large, 2'097'152);
  return stats;
}

TEST(MemorySummary, SpecExampleTableFromGoldenVectorG2) {
  const std::string expected =
      "|===========================================================================|\n"
      "|                  PyTorch CUDA memory summary, device ID 0                 |\n"
      "|---------------------------------------------------------------------------|\n"
      "|            CUDA OOMs: 0            |        cudaMalloc retries: 0         |\n"
      "|===========================================================================|\n"
      "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Allocated memory      |  65536 KiB |  67584 KiB |  75776 KiB |  10240 KiB |\n"
      "|       from large pool |  65536 KiB |  67584 KiB |  75776 KiB |  10240 KiB |\n"
      "|       from small pool |      0 KiB |      0 KiB |      0 KiB |      0 KiB |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Active memory         |  65536 KiB |  67584 KiB |  75776 KiB |  10240 KiB |\n"
      "|       from large pool |  65536 KiB |  67584 KiB |  75776 KiB |  10240 KiB |\n"
      "|       from small pool |      0 KiB |      0 KiB |      0 KiB |      0 KiB |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Requested memory      |  64000 KiB |  66048 KiB |  74240 KiB |  10240 KiB |\n"
      "|       from large pool |  64000 KiB |  66048 KiB |  74240 KiB |  10240 KiB |\n"
      "|       from small pool |      0 KiB |      0 KiB |      0 KiB |      0 KiB |\n"
      "|---------------------------------------------------------------------------|\n"
      "| GPU reserved memory   |  69632 KiB |  69632 KiB |  69632 KiB |      0 B   |\n"
      "|       from large pool |  69632 KiB |  69632 KiB |  69632 KiB |      0 B   |\n"
      "|       from small pool |      0 KiB |      0 KiB |      0 KiB |      0 B   |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Non-releasable memory |   4095 KiB |  19455 KiB |  23551 KiB |  19455 KiB |\n"
      "|       from large pool |   4095 KiB |  19455 KiB |  23551 KiB |  19455 KiB |\n"
      "|       from small pool |      0 KiB |      0 KiB |      0 KiB |      0 KiB |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Allocations           |       7    |       7    |       8    |       1    |\n"
      "|       from large pool |       7    |       7    |       8    |       1    |\n"
      "|       from small pool |       0    |       0    |       0    |       0    |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Active allocs         |       7    |       7    |       8    |       1    |\n"
      "|       from large pool |       7    |       7    |       8    |       1    |\n"
      "|       from small pool |       0    |       0    |       0    |       0    |\n"
      "|---------------------------------------------------------------------------|\n"
      "| GPU reserved segments |       4    |       4    |       4    |       0    |\n"
      "|       from large pool |       4    |       4    |       4    |       0    |\n"
      "|       from small pool |       0    |       0    |       0    |       0    |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Non-releasable allocs |       2    |       2    |       3    |       1    |\n"
      "|       from large pool |       2    |       2    |       3    |       1    |\n"
      "|       from small pool |       0    |       0    |       0    |       0    |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Oversize allocations  |       0    |       0    |       0    |       0    |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Oversize GPU segments |       0    |       0    |       0    |       0    |\n"
      "|===========================================================================|\n";
  EXPECT_EQ(memory_summary(g2_stats(), 0, false), expected);
}

TEST(MemorySummary, AbbreviatedDropsThePoolRows) {
  const std::string full = memory_summary(g2_stats(), 0, false);
  const std::string abbreviated = memory_summary(g2_stats(), 0, true);
  EXPECT_EQ(abbreviated.find("from large pool"), std::string::npos);
  EXPECT_EQ(abbreviated.find("from small pool"), std::string::npos);
  // 18 pool rows fewer, everything else identical.
  std::string stripped;
  std::istringstream lines(full);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("      from ") == std::string::npos)
      stripped += line + "\n";
  }
  EXPECT_EQ(abbreviated, stripped);
}

TEST(MemorySummary, EveryLineIs77CharactersAndTheDeviceIsLeftAligned) {
  DeviceStats stats = g2_stats();
  stats.num_ooms = 123;
  stats.num_alloc_retries = 45;
  const std::string text = memory_summary(stats, 7, false);
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    EXPECT_EQ(line.size(), 77u) << line;
  EXPECT_NE(
      text.find("|                  PyTorch CUDA memory summary, device ID 7                 |"),
      std::string::npos);
  EXPECT_NE(
      text.find("|            CUDA OOMs: 123          |        cudaMalloc retries: 45        |"),
      std::string::npos);
}

// The byte cell examples of §9.4: the unit follows the "all" row, the value is floored.
TEST(MemorySummary, ByteCellUnitsAndFlooring) {
  const auto allocated_row = [](std::int64_t bytes) {
    DeviceStats stats;
    add(stats.allocated_bytes, StatType::small_pool, bytes);
    const std::string text = memory_summary(stats, 0, true);
    const std::size_t row = text.find("| Allocated memory      | ");
    return text.substr(row + 26, 10);
  };
  EXPECT_EQ(allocated_row(1536), "  1536 B  ");
  EXPECT_EQ(allocated_row(786'431), "786431 B  ");
  EXPECT_EQ(allocated_row(786'432), "   768 KiB");
  EXPECT_EQ(allocated_row(2'099'712), "  2050 KiB");
  EXPECT_EQ(allocated_row(19'922'432), " 19455 KiB");
  EXPECT_EQ(allocated_row(1'074'790'912), "  1025 MiB");
  EXPECT_EQ(allocated_row(std::int64_t{5} << 50), "  5120 TiB");
  EXPECT_EQ(allocated_row(std::int64_t{2} << 60), "  2048 PiB");
}

TEST(MemorySummary, CountCellUnits) {
  const auto allocations_row = [](std::int64_t count) {
    DeviceStats stats;
    add(stats.allocation, StatType::large_pool, count);
    const std::string text = memory_summary(stats, 0, true);
    const std::size_t row = text.find("| Allocations           | ");
    return text.substr(row + 26, 10);
  };
  EXPECT_EQ(allocations_row(749'999), " 749999   ");
  EXPECT_EQ(allocations_row(750'000), "    750 K ");
  EXPECT_EQ(allocations_row(2'500'000'000), "   2500 M ");
}

// Every real recording: memory_stats() read back and formatted gives PyTorch's own
// memory_summary() byte for byte.
TEST(MemorySummaryFixtures, EveryRecordingMatchesPyTorchByteForByte) {
  int fixtures = 0;
  for (const auto& entry : std::filesystem::directory_iterator(FRAGSCOPE_FIXTURES)) {
    const std::string name = entry.path().filename().string();
    if (!name.ends_with(".stats.json"))
      continue;
    SCOPED_TRACE(name);
    const std::string stem = name.substr(0, name.size() - std::string(".stats.json").size());
    const DeviceStats stats = memory_stats_from_json(read_json(entry.path()).at("memory_stats"));
    const std::string expected =
        read_file(std::filesystem::path(FRAGSCOPE_FIXTURES) / (stem + ".summary.txt"));
    ASSERT_FALSE(expected.empty());
    EXPECT_EQ(memory_summary(stats, 0, false), expected);
    ++fixtures;
  }
  EXPECT_EQ(fixtures, 8);
}

TEST(FormatSize, C10Boundaries) {
  EXPECT_EQ(format_size(0), "0 bytes");
  EXPECT_EQ(format_size(1), "1 bytes");
  EXPECT_EQ(format_size(1024), "1024 bytes");
  EXPECT_EQ(format_size(1025), "1.00 KiB");
  EXPECT_EQ(format_size(1536), "1.50 KiB");
  EXPECT_EQ(format_size(kMiB), "1024.00 KiB");
  EXPECT_EQ(format_size(kMiB + 1), "1.00 MiB");
  EXPECT_EQ(format_size(20 * kMiB), "20.00 MiB");
  EXPECT_EQ(format_size(kGiB), "1024.00 MiB");
  EXPECT_EQ(format_size(kGiB + 1), "1.00 GiB");
  EXPECT_EQ(format_size(kTiB), "1024.00 GiB");
  EXPECT_EQ(format_size(kH200TotalMemory), "139.80 GiB");
}

const std::string kHint =
    " If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
    "for Memory Management  (https://docs.pytorch.org/docs/stable/notes/"
    "cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)";

// gpt_oom_cap: the OOM PyTorch raised, rebuilt from the recording's numbers.
TEST(OomMessageFixture, GptOomCapReproducesPyTorchsText) {
  const std::filesystem::path fixtures(FRAGSCOPE_FIXTURES);
  const nlohmann::json recording = read_json(fixtures / "gpt_oom_cap.stats.json");
  const std::string outcome = recording.at("outcome");
  ASSERT_TRUE(outcome.starts_with("oom: "));

  OomMessageInputs inputs;
  inputs.device = 0;
  inputs.total_capacity = recording.at("total_memory").get<Bytes>();
  inputs.allowed = recording.at("params").at("cap_gib").get<Bytes>() * kGiB;

  // The trace: its oom entry carries device_free and the rounded request; reserved memory at that
  // point is the segment_alloc sizes minus the segment_free sizes before it.
  const snapshot::Snapshot recorded = snapshot::read_snapshot(fixtures / "gpt_oom_cap.pickle.gz");
  ASSERT_EQ(recorded.device_traces.size(), 1u);
  Bytes reserved = 0;
  std::optional<TraceEvent> oom;
  for (const TraceEvent& event : recorded.device_traces[0]) {
    if (event.action == TraceAction::oom) {
      oom = event;
      break;
    }
    if (event.action == TraceAction::segment_alloc || event.action == TraceAction::segment_map)
      reserved += event.size;
    if (event.action == TraceAction::segment_free || event.action == TraceAction::segment_unmap)
      reserved -= event.size;
  }
  ASSERT_TRUE(oom.has_value());
  inputs.device_free = oom->addr;
  inputs.reserved = reserved;
  // A rounded request of 10 MiB or more asks for a segment rounded up to 2 MiB.
  ASSERT_GE(oom->size, 10 * kMiB);
  inputs.tried_to_allocate = (oom->size + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);

  // allocated_bytes at the OOM is not in the trace (it records requests, not block sizes):
  // replaying the trace through the allocator model gives it, and must agree on reserved.
  replay::ReplayOptions options;
  options.allowed_memory = inputs.allowed;
  options.total_memory = inputs.total_capacity;
  const replay::ReplayResult replayed = replay::replay_snapshot(recorded, options);
  ASSERT_EQ(replayed.run.ooms.size(), 1u);
  EXPECT_EQ(replayed.run.ooms[0].oom.reserved, inputs.reserved);
  inputs.allocated = replayed.run.ooms[0].oom.allocated;
  // NVML's per-process figure is recorded nowhere but in the text: 6.64 GiB.
  inputs.processes = {{1234, 7'129'645'056, true}};

  EXPECT_EQ("oom: " + oom_message(inputs), outcome);
}

TEST(OomMessage, GoldenVectorG7LimitedToThirtyMiB) {
  // 25 MiB -> a 26 MiB segment used whole; 1000 B -> a 1024 B block in a 2 MiB small segment;
  // then 3 MiB needs a 20 MiB segment that the 30 MiB limit refuses.
  OomMessageInputs inputs;
  inputs.tried_to_allocate = 20 * kMiB;
  inputs.total_capacity = kH200TotalMemory;
  inputs.device_free = 148'000'000'000;
  inputs.processes = {{42, 600 * kMiB, true}};
  inputs.allowed = 30 * kMiB;
  inputs.allocated = 27'262'976 + 1024;
  inputs.reserved = 26 * kMiB + 2 * kMiB;
  const std::string text = oom_message(inputs);
  EXPECT_EQ(text,
            "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
            "139.80 GiB of which 137.84 GiB is free. Including non-PyTorch memory, this process "
            "has 600.00 MiB memory in use. 30.00 MiB allowed; Of the allocated memory 26.00 MiB "
            "is allocated by PyTorch, and 2.00 MiB is reserved by PyTorch but unallocated." +
                kHint);
}

TEST(OomMessage, SpecVerifiedExamples) {
  OomMessageInputs huge;
  huge.tried_to_allocate = kTiB;
  huge.total_capacity = kH200TotalMemory;
  huge.device_free = 148'390'000'000;           // 138.20 GiB
  huge.processes = {{7, 1'707'000'000, true}};  // 1.59 GiB
  huge.allocated = kGiB + 2 * kMiB;             // 1.00 GiB (exactly 1 GiB prints "1024.00 MiB")
  huge.reserved = huge.allocated + 19 * kMiB;
  EXPECT_EQ(oom_message(huge),
            "CUDA out of memory. Tried to allocate 1024.00 GiB. GPU 0 has a total capacity of "
            "139.80 GiB of which 138.20 GiB is free. Including non-PyTorch memory, this process "
            "has 1.59 GiB memory in use. Of the allocated memory 1.00 GiB is allocated by "
            "PyTorch, and 19.00 MiB is reserved by PyTorch but unallocated." +
                kHint);

  OomMessageInputs capped;
  capped.tried_to_allocate = 400 * kMiB;
  capped.total_capacity = kH200TotalMemory;
  capped.device_free = 149'270'000'000;  // 139.02 GiB
  capped.processes = {{7, 788 * kMiB, true}};
  capped.allowed = 500 * kMiB;
  capped.allocated = 200 * kMiB;
  capped.reserved = 200 * kMiB;
  EXPECT_EQ(oom_message(capped),
            "CUDA out of memory. Tried to allocate 400.00 MiB. GPU 0 has a total capacity of "
            "139.80 GiB of which 139.02 GiB is free. Including non-PyTorch memory, this process "
            "has 788.00 MiB memory in use. 500.00 MiB allowed; Of the allocated memory 200.00 "
            "MiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated." +
                kHint);
}

TEST(OomMessage, OtherProcessesPrivatePoolsAndNoNvml) {
  OomMessageInputs inputs;
  inputs.device = 3;
  inputs.tried_to_allocate = 2 * kMiB;
  inputs.total_capacity = 80 * kGiB;
  inputs.device_free = 512;
  inputs.processes = {{999, 10 * kGiB, false}, {1000, 70 * kGiB, true}};
  inputs.allocated = 60 * kGiB;
  inputs.private_pool_free = 2 * kGiB;
  inputs.reserved = 68 * kGiB;
  EXPECT_EQ(oom_message(inputs),
            "CUDA out of memory. Tried to allocate 2.00 MiB. GPU 3 has a total capacity of "
            "80.00 GiB of which 512 bytes is free. Process 999 has 10.00 GiB memory in use. "
            "Including non-PyTorch memory, this process has 70.00 GiB memory in use. Of the "
            "allocated memory 62.00 GiB is allocated by PyTorch, with 2.00 GiB allocated in "
            "private pools (e.g., CUDA Graphs), and 6.00 GiB is reserved by PyTorch but "
            "unallocated." +
                kHint);
  inputs.processes.clear();  // no NVML: no process clause at all
  EXPECT_NE(oom_message(inputs).find("is free. Of the allocated memory"), std::string::npos);
}

TEST(OomMessage, CudaMallocAsyncBackendText) {
  AsyncOomMessageInputs inputs;
  inputs.device = 0;
  inputs.currently_allocated = 900 * kMiB;
  inputs.requested = 200 * kMiB;
  inputs.device_total = kH200TotalMemory;
  inputs.device_free = 100 * kGiB;
  inputs.pytorch_limit = kGiB;
  EXPECT_EQ(async_oom_message(inputs),
            "Allocation on device 0 would exceed allowed memory. (out of memory)\n"
            "Currently allocated     : 900.00 MiB\n"
            "Requested               : 200.00 MiB\n"
            "Device limit            : 139.80 GiB\n"
            "Free (according to CUDA): 100.00 GiB\n"
            "PyTorch limit (set by user-supplied memory fraction)\n"
            "                        : 1024.00 MiB");
  EXPECT_EQ(kOomMoreThan1EB, "CUDA out of memory. Tried to allocate more than 1EB memory.");
}

}  // namespace
}  // namespace fragscope::alloc
