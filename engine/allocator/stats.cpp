// DeviceStats resets and the memory_stats() key set of PyTorch 2.11 (torch-allocator-spec §9).
#include "engine/allocator/stats.h"

#include <array>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>

#include "engine/core/error.h"

namespace fragscope::alloc {
namespace {

constexpr std::array<std::string_view, kStatTypes> kStatTypeNames{"all", "small_pool",
                                                                  "large_pool"};
constexpr std::array<std::string_view, 4> kStatFieldNames{"allocated", "current", "freed", "peak"};

std::int64_t& stat_field(Stat& stat, std::size_t field) {
  switch (field) {
    case 0:
      return stat.allocated;
    case 1:
      return stat.current;
    case 2:
      return stat.freed;
    default:
      return stat.peak;
  }
}

// Every memory_stats() key paired with where its value lives; one table drives both directions.
// The order here does not matter: std::map sorts the keys as PyTorch's OrderedDict does.
template <typename Visit>
void for_each_key(DeviceStats& stats, Visit&& visit) {
  using ArrayMember = StatArray DeviceStats::*;
  static const std::array<std::pair<std::string_view, ArrayMember>, 9> kArrays{{
      {"active", &DeviceStats::active},
      {"active_bytes", &DeviceStats::active_bytes},
      {"allocated_bytes", &DeviceStats::allocated_bytes},
      {"allocation", &DeviceStats::allocation},
      {"inactive_split", &DeviceStats::inactive_split},
      {"inactive_split_bytes", &DeviceStats::inactive_split_bytes},
      {"requested_bytes", &DeviceStats::requested_bytes},
      {"reserved_bytes", &DeviceStats::reserved_bytes},
      {"segment", &DeviceStats::segment},
  }};
  for (const auto& [name, member] : kArrays) {
    for (std::size_t type = 0; type < kStatTypes; ++type) {
      for (std::size_t field = 0; field < kStatFieldNames.size(); ++field) {
        const std::string key = std::string(name) + "." + std::string(kStatTypeNames[type]) + "." +
                                std::string(kStatFieldNames[field]);
        visit(key, stat_field((stats.*member).by_type[type], field));
      }
    }
  }
  using StatMember = Stat DeviceStats::*;
  static const std::array<std::pair<std::string_view, StatMember>, 2> kSingles{{
      {"oversize_allocations", &DeviceStats::oversize_allocations},
      {"oversize_segments", &DeviceStats::oversize_segments},
  }};
  for (const auto& [name, member] : kSingles) {
    for (std::size_t field = 0; field < kStatFieldNames.size(); ++field)
      visit(std::string(name) + "." + std::string(kStatFieldNames[field]),
            stat_field(stats.*member, field));
  }
  using CounterMember = std::int64_t DeviceStats::*;
  static const std::array<std::pair<std::string_view, CounterMember>, 6> kCounters{{
      {"max_split_size", &DeviceStats::max_split_size},
      {"num_alloc_retries", &DeviceStats::num_alloc_retries},
      {"num_device_alloc", &DeviceStats::num_device_alloc},
      {"num_device_free", &DeviceStats::num_device_free},
      {"num_ooms", &DeviceStats::num_ooms},
      {"num_sync_all_streams", &DeviceStats::num_sync_all_streams},
  }};
  for (const auto& [name, member] : kCounters)
    visit(std::string(name), stats.*member);
}

template <typename Apply>
void for_each_array(DeviceStats& stats, Apply&& apply) {
  for (StatArray* array : {&stats.allocation, &stats.segment, &stats.active, &stats.inactive_split,
                           &stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes,
                           &stats.inactive_split_bytes, &stats.requested_bytes}) {
    for (Stat& stat : array->by_type)
      apply(stat);
  }
  apply(stats.oversize_allocations);
  apply(stats.oversize_segments);
}

}  // namespace

void DeviceStats::reset_peak() {
  for_each_array(*this, [](Stat& stat) { stat.reset_peak(); });
}

void DeviceStats::reset_accumulated() {
  for_each_array(*this, [](Stat& stat) { stat.reset_accumulated(); });
  num_alloc_retries = 0;
  num_ooms = 0;
  num_sync_all_streams = 0;
  num_device_alloc = 0;
  num_device_free = 0;
}

std::map<std::string, std::int64_t> to_memory_stats(const DeviceStats& stats) {
  std::map<std::string, std::int64_t> flat;
  DeviceStats copy = stats;
  for_each_key(copy,
               [&](const std::string& key, std::int64_t& value) { flat.emplace(key, value); });
  return flat;
}

DeviceStats from_memory_stats(const std::map<std::string, std::int64_t>& flat) {
  DeviceStats stats;
  std::size_t found = 0;
  for_each_key(stats, [&](const std::string& key, std::int64_t& value) {
    const auto it = flat.find(key);
    if (it == flat.end())
      throw InputError("memory_stats: missing key '" + key + "'");
    value = it->second;
    ++found;
  });
  if (found != flat.size()) {
    const std::map<std::string, std::int64_t> known = to_memory_stats(DeviceStats{});
    for (const auto& [key, value] : flat) {
      if (!known.contains(key))
        throw InputError("memory_stats: unknown key '" + key + "' (PyTorch 2.11 has " +
                         std::to_string(known.size()) + " keys)");
    }
  }
  return stats;
}

DeviceStats memory_stats_from_json(const nlohmann::json& object) {
  if (!object.is_object())
    throw InputError("memory_stats: expected a JSON object, got " +
                     std::string(object.type_name()));
  std::map<std::string, std::int64_t> flat;
  for (const auto& [key, value] : object.items()) {
    if (!value.is_number_integer())
      throw InputError("memory_stats: '" + key + "' must be an integer, got " + value.dump());
    if (value.is_number_unsigned() &&
        value.get<std::uint64_t>() >
            static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      throw InputError("memory_stats: '" + key + "' does not fit in int64: " + value.dump());
    flat.emplace(key, value.get<std::int64_t>());
  }
  return from_memory_stats(flat);
}

}  // namespace fragscope::alloc
