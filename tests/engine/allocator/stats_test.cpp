// DeviceStats resets (torch-allocator-spec §9.1) and the 122 memory_stats() keys (§9.2),
// checked against every real PyTorch 2.11 recording.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/allocator/caching_allocator_impl.h"
#include "engine/allocator/stats.h"
#include "engine/core/error.h"

namespace fragscope::alloc {
namespace {

std::vector<std::filesystem::path> stats_fixtures() {
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(FRAGSCOPE_FIXTURES)) {
    if (entry.path().filename().string().ends_with(".stats.json"))
      paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

// ordered_json keeps the key order of the file, i.e. the order PyTorch's OrderedDict had.
nlohmann::ordered_json read_memory_stats(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::ordered_json::parse(in).at("memory_stats");
}

DeviceStats busy_stats() {
  DeviceStats stats;
  stats.allocated_bytes[StatType::aggregate].increase(3000);
  stats.allocated_bytes[StatType::large_pool].increase(3000);
  stats.allocated_bytes[StatType::aggregate].decrease(1000);
  stats.allocated_bytes[StatType::large_pool].decrease(1000);
  stats.segment[StatType::small_pool].increase(2);
  stats.segment[StatType::small_pool].decrease(1);
  stats.oversize_allocations.increase(5);
  stats.oversize_allocations.decrease(2);
  stats.oversize_segments.increase(4);
  stats.oversize_segments.decrease(1);
  stats.num_alloc_retries = 2;
  stats.num_ooms = 1;
  stats.num_sync_all_streams = 3;
  stats.num_device_alloc = 7;
  stats.num_device_free = 6;
  stats.max_split_size = 64 * 1048576;
  return stats;
}

// The allocator's change(stat, amount) is increase(amount) for a positive amount, decrease(-amount)
// for a negative one and nothing for 0 (free_block adds up a net change to the inactive-split
// stats and applies it so), through rises past the peak, falls below it and a reset peak.
TEST(Stat, ChangeIsIncreaseOrDecreaseBySign) {
  Stat changed;
  Stat stepped;
  const std::int64_t amounts[] = {0, 5, -3, 0, 7, -9, -1, 4, 0, 2, -5, 6, 8, -20, 1};
  for (std::size_t i = 0; i < std::size(amounts); ++i) {
    const std::int64_t amount = amounts[i];
    detail::change(changed, amount);
    if (amount > 0)
      stepped.increase(amount);
    else if (amount < 0)
      stepped.decrease(-amount);
    ASSERT_EQ(changed, stepped) << "after amount " << i;
    if (i == 6) {
      changed.reset_peak();
      stepped.reset_peak();
    }
  }
  EXPECT_EQ(changed.peak, 14);
  EXPECT_EQ(changed.freed, 38);
}

TEST(DeviceStats, ResetPeakSetsPeakToCurrentEverywhere) {
  DeviceStats stats = busy_stats();
  stats.reset_peak();
  EXPECT_EQ(stats.allocated_bytes[StatType::aggregate].peak, 2000);
  EXPECT_EQ(stats.allocated_bytes[StatType::large_pool].peak, 2000);
  EXPECT_EQ(stats.segment[StatType::small_pool].peak, 1);
  EXPECT_EQ(stats.oversize_allocations.peak, 3);
  EXPECT_EQ(stats.oversize_segments.peak, 3);
  // Nothing else moves.
  EXPECT_EQ(stats.allocated_bytes[StatType::aggregate].allocated, 3000);
  EXPECT_EQ(stats.num_ooms, 1);
  for (const auto& [key, value] : to_memory_stats(stats)) {
    if (key.ends_with(".peak")) {
      const std::string current = key.substr(0, key.size() - 4) + "current";
      EXPECT_EQ(value, to_memory_stats(stats).at(current)) << key;
    }
  }
}

TEST(DeviceStats, ResetAccumulatedZeroesTotalsAndTheFiveCounters) {
  DeviceStats stats = busy_stats();
  stats.reset_accumulated();
  for (const auto& [key, value] : to_memory_stats(stats)) {
    if (key.ends_with(".allocated") || key.ends_with(".freed")) {
      EXPECT_EQ(value, 0) << key;
    }
  }
  EXPECT_EQ(stats.num_alloc_retries, 0);
  EXPECT_EQ(stats.num_ooms, 0);
  EXPECT_EQ(stats.num_sync_all_streams, 0);
  EXPECT_EQ(stats.num_device_alloc, 0);
  EXPECT_EQ(stats.num_device_free, 0);
  // Current, peak and the configured max_split_size stay.
  EXPECT_EQ(stats.allocated_bytes[StatType::aggregate].current, 2000);
  EXPECT_EQ(stats.allocated_bytes[StatType::aggregate].peak, 3000);
  EXPECT_EQ(stats.oversize_segments.current, 3);
  EXPECT_EQ(stats.max_split_size, 64 * 1048576);
}

TEST(MemoryStats, ExactlyThe122KeysOfPyTorch211) {
  const auto flat = to_memory_stats(DeviceStats{});
  EXPECT_EQ(flat.size(), 122u);
  EXPECT_TRUE(flat.contains("allocation.all.current"));
  EXPECT_FALSE(flat.contains("allocated.all.current"));
  EXPECT_TRUE(flat.contains("oversize_segments.freed"));
  EXPECT_EQ(flat.at("max_split_size"), -1);
}

TEST(MemoryStats, NamesMapToTheRightFields) {
  DeviceStats stats;
  stats.inactive_split_bytes[StatType::small_pool].current = 11;
  stats.requested_bytes[StatType::large_pool].freed = 12;
  stats.active[StatType::aggregate].peak = 13;
  stats.oversize_allocations.allocated = 14;
  stats.num_sync_all_streams = 15;
  const auto flat = to_memory_stats(stats);
  EXPECT_EQ(flat.at("inactive_split_bytes.small_pool.current"), 11);
  EXPECT_EQ(flat.at("requested_bytes.large_pool.freed"), 12);
  EXPECT_EQ(flat.at("active.all.peak"), 13);
  EXPECT_EQ(flat.at("oversize_allocations.allocated"), 14);
  EXPECT_EQ(flat.at("num_sync_all_streams"), 15);
}

TEST(MemoryStats, MissingOrUnknownKeyIsAnErrorNamingIt) {
  auto flat = to_memory_stats(busy_stats());
  flat.erase("segment.large_pool.peak");
  try {
    from_memory_stats(flat);
    FAIL() << "a missing key must be an error";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("'segment.large_pool.peak'"), std::string::npos);
  }
  flat = to_memory_stats(busy_stats());
  flat.emplace("num_oom_rejections", 0);
  try {
    from_memory_stats(flat);
    FAIL() << "an unknown key must be an error";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("'num_oom_rejections'"), std::string::npos);
  }
  EXPECT_THROW(memory_stats_from_json(nlohmann::json::parse(R"({"active.all.current": 1.5})")),
               InputError);
  EXPECT_THROW(memory_stats_from_json(nlohmann::json::array()), InputError);
}

TEST(MemoryStats, RoundTripsInMemory) {
  const DeviceStats stats = busy_stats();
  EXPECT_EQ(from_memory_stats(to_memory_stats(stats)), stats);
}

// Every real recording: all 122 keys come back with the same values, in PyTorch's order.
TEST(MemoryStatsFixtures, EveryRecordingRoundTripsAll122Keys) {
  const auto paths = stats_fixtures();
  ASSERT_EQ(paths.size(), 8u);
  for (const auto& path : paths) {
    SCOPED_TRACE(path.filename().string());
    const nlohmann::ordered_json recorded = read_memory_stats(path);
    ASSERT_EQ(recorded.size(), 122u);
    const auto flat = to_memory_stats(memory_stats_from_json(nlohmann::json(recorded)));
    ASSERT_EQ(flat.size(), recorded.size());
    auto ours = flat.begin();
    for (const auto& [key, value] : recorded.items()) {
      EXPECT_EQ(ours->first, key);
      EXPECT_EQ(ours->second, value.get<std::int64_t>()) << key;
      ++ours;
    }
  }
}

}  // namespace
}  // namespace fragscope::alloc
