#pragma once
// The allocator's statistics, with PyTorch's names and semantics (torch-allocator-spec §9).
// The allocator model updates them; to_memory_stats (here) and memory_summary (summary.h) turn
// them into memory_stats() keys and the memory_summary() text.
#include <array>
#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace fragscope::alloc {

struct Stat {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t allocated = 0;  // sum of all increases
  std::int64_t freed = 0;      // sum of all decreases

  void increase(std::int64_t amount) {
    current += amount;
    if (current > peak)
      peak = current;
    allocated += amount;
  }
  void decrease(std::int64_t amount) {
    current -= amount;
    freed += amount;
  }
  void reset_peak() { peak = current; }
  void reset_accumulated() { allocated = freed = 0; }
  friend bool operator==(const Stat&, const Stat&) = default;
};

enum class StatType : std::uint8_t { aggregate = 0, small_pool = 1, large_pool = 2 };
inline constexpr std::size_t kStatTypes = 3;

// Index 0 "all", 1 "small_pool", 2 "large_pool"; every update touches "all" and the pool's entry.
struct StatArray {
  std::array<Stat, kStatTypes> by_type{};
  Stat& operator[](StatType t) { return by_type[static_cast<std::size_t>(t)]; }
  const Stat& operator[](StatType t) const { return by_type[static_cast<std::size_t>(t)]; }
  friend bool operator==(const StatArray&, const StatArray&) = default;
};

struct DeviceStats {
  StatArray allocation;      // count of allocations handed out
  StatArray segment;         // cudaMalloc'd segments
  StatArray active;          // active blocks (allocated or pending free)
  StatArray inactive_split;  // free blocks inside split segments
  StatArray allocated_bytes;
  StatArray reserved_bytes;
  StatArray active_bytes;
  StatArray inactive_split_bytes;
  StatArray requested_bytes;
  Stat oversize_allocations;
  Stat oversize_segments;
  std::int64_t num_alloc_retries = 0;
  std::int64_t num_ooms = 0;
  std::int64_t num_sync_all_streams = 0;
  std::int64_t num_device_alloc = 0;
  std::int64_t num_device_free = 0;
  std::int64_t max_split_size = -1;  // -1 = unlimited

  void reset_peak();
  void reset_accumulated();
  friend bool operator==(const DeviceStats&, const DeviceStats&) = default;
};

// memory_stats(): the 122 flattened keys, sorted as PyTorch sorts them.
std::map<std::string, std::int64_t> to_memory_stats(const DeviceStats& stats);
// The inverse, for tests and for stats recorded by PyTorch (*.stats.json). A missing or unknown
// key is an error naming it.
DeviceStats from_memory_stats(const std::map<std::string, std::int64_t>& flat);
// The same from a JSON object (a *.stats.json "memory_stats" value); non-integers are errors.
DeviceStats memory_stats_from_json(const nlohmann::json& object);

}  // namespace fragscope::alloc
