#pragma once
// Helpers for the storage tests: temporary files and synthetic event streams.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/trace.h"
#include "storage/db/run_catalog.h"
#include "storage/db/snapshot_import.h"

namespace fragscope::storage::test {

// A fresh directory under the temp dir, removed (with the database, -wal and -shm) at scope end.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "fragscope-storage-XXXXXX");
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ignored);
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A plausible allocator trace: segments, allocations inside them, frees (requested then
// completed), with increasing times and a few streams. Deterministic for a seed.
inline std::vector<TraceEvent> synthetic_trace(std::size_t count, std::uint32_t seed = 1) {
  std::mt19937_64 random(seed);
  std::vector<TraceEvent> events;
  events.reserve(count);
  struct Live {
    std::uint64_t addr;
    std::uint64_t size;
    StreamId stream;
  };
  std::vector<Live> live;
  std::uint64_t next_segment = 0x7f0000000000;
  std::uint64_t cursor = 0;
  std::uint64_t segment_end = 0;
  std::int64_t time = 1'700'000'000'000'000;
  const StreamId streams[] = {StreamId{0}, StreamId{0x55d0c0ffee00}};
  while (events.size() < count) {
    time += static_cast<std::int64_t>(random() % 40);
    const StreamId stream = streams[random() % 8 == 0 ? 1 : 0];
    if (!live.empty() && random() % 2 == 0) {
      const std::size_t pick = random() % live.size();
      // A free carries the block's own stream, as PyTorch records it.
      const Live block = live[pick];
      live[pick] = live.back();
      live.pop_back();
      events.push_back({TraceAction::free_requested, block.addr, block.size, block.stream, time,
                        FrameStackId{}});
      if (events.size() < count)
        events.push_back({TraceAction::free_completed, block.addr, block.size, block.stream, time,
                          FrameStackId{}});
      continue;
    }
    const std::uint64_t size = 512 * (1 + random() % 4096);
    if (cursor + size > segment_end) {
      const std::uint64_t segment = 20 * 1024 * 1024 + size;
      cursor = next_segment;
      segment_end = cursor + segment;
      next_segment += segment + 0x200000;
      events.push_back({TraceAction::segment_alloc, cursor, segment, stream, time, FrameStackId{}});
      if (events.size() == count)
        break;
    }
    events.push_back({TraceAction::alloc, cursor, size - random() % 512, stream, time,
                      FrameStackId{static_cast<std::uint32_t>(random() % 3)}});
    live.push_back({cursor, events.back().size, stream});
    cursor += size;
  }
  return events;
}

}  // namespace fragscope::storage::test

#include <fstream>
#include <sstream>

namespace fragscope::storage::test {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

}  // namespace fragscope::storage::test

namespace fragscope::storage::test {

// The real PyTorch 2.11 recordings under tests/fixtures/torch-2.11-h200 (FRAGSCOPE_FIXTURES).
inline const char* const kTorchRecordings[] = {
    "gpt_ckpt_accum",        "gpt_fixedlen_default", "gpt_oom_cap",           "gpt_varlen_default",
    "gpt_varlen_expandable", "random_default",       "random_split64_round4", "streams_default"};

// A recording's file: fixture("gpt_oom_cap", ".pickle.gz").
inline std::string fixture(const std::string& name, const std::string& suffix) {
  return std::string(FRAGSCOPE_FIXTURES) + "/" + name + suffix;
}

// Import options naming the run (and the source file) `name`.
inline ImportOptions import_options(const std::string& name,
                                    std::optional<std::size_t> device = std::nullopt) {
  ImportOptions options;
  options.name = name;
  options.source_file = name;
  options.device = device;
  return options;
}

// A run record with this name and the current environment, for tests that write runs.
inline RunRecord record_named(std::string name) {
  RunRecord record;
  record.name = std::move(name);
  record.environment = Environment::current();
  return record;
}

}  // namespace fragscope::storage::test
