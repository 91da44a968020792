#include "usecases/compare.h"

#include <algorithm>
#include <string>

#include "engine/allocator/config.h"
#include "engine/analysis/metrics.h"
#include "engine/analysis/recorded_environment.h"
#include "engine/core/error.h"
#include "storage/db/stats_at.h"

namespace fragscope::usecases {

snapshot::LayoutRules layout_rules_of(const storage::RunRecord& record) {
  // A recording's settings dict may lack keys its release never wrote: the layout needs only the
  // three that decide block sizes, read tolerantly.
  if (auto it = record.summary.find("allocator_settings");
      it != record.summary.end() && it->is_object())
    return snapshot::LayoutRules::from_allocator_settings(*it);
  return snapshot::LayoutRules::from_config(storage::allocator_config_of(record).config);
}

analysis::RunProfile profile_of(storage::RunReader& reader, const storage::RunRecord& record,
                                std::size_t phases, const WorkControl& control) {
  const storage::RunId id = record.id;
  analysis::RunProfile profile;
  profile.label = "#" + std::to_string(id.value) + " " + record.name;
  profile.alloc_conf = record.alloc_conf;
  profile.capacity = record.capacity;
  const storage::Environment& env = record.environment;
  profile.environment = {{"torch", env.torch_version},
                         {"cuda", env.cuda_version},
                         {"driver", env.driver_version},
                         {"gpu", env.gpu_name},
                         {"gpu_memory", env.gpu_memory ? std::to_string(env.gpu_memory) : ""},
                         {"fragscope", env.fragscope_version}};
  if (const auto fingerprint = reader.recorded_environment(id))
    profile.recorded_environment = analysis::parse_recorded_environment(
        *fingerprint, reader.database_path() + ": run " + std::to_string(id.value));
  if (auto stats = record.summary.find("memory_stats");
      stats != record.summary.end() && stats->contains("num_alloc_retries"))
    profile.alloc_retries = (*stats)["num_alloc_retries"].get<std::int64_t>();
  if (auto time = record.summary.find("estimated_step_time_ratio");
      time != record.summary.end() && time->is_number())
    profile.estimated_step_time = time->get<double>();

  control.check();
  const auto events = reader.events(id, 0, record.event_count);
  control.check();
  if (!analysis::measure_run(profile, events, snapshot::SegmentState{layout_rules_of(record)},
                             phases)) {
    // The stored series are exact even where the layout is unknown.
    for (const auto& bucket : reader.timeline(id, 1)) {
      analysis::MemorySample& peak = profile.metrics.peak;
      peak.allocated = std::max<Bytes>(peak.allocated, static_cast<Bytes>(bucket.max.allocated));
      peak.reserved = std::max<Bytes>(peak.reserved, static_cast<Bytes>(bucket.max.reserved));
      peak.active = std::max<Bytes>(peak.active, static_cast<Bytes>(bucket.max.active));
      peak.requested = std::max<Bytes>(peak.requested, static_cast<Bytes>(bucket.max.requested));
    }
  }
  return profile;
}

StoredComparison compare_stored_runs(storage::RunStore& store, std::span<const storage::RunId> runs,
                                     std::size_t phases, const WorkControl& control) {
  StoredComparison result;
  for (const storage::RunId id : runs) {
    control.check();
    control.progress.report("measuring", result.records.size(), runs.size());
    result.records.push_back(store.run(id));
    result.profiles.push_back(profile_of(store, result.records.back(), phases, control));
  }
  control.progress.report("measuring", runs.size(), runs.size());
  result.comparison = analysis::compare_runs(result.profiles);
  return result;
}

std::optional<Bytes> reserved_unallocated_at_peak(const analysis::RunProfile& profile) {
  if (profile.series_only)
    return std::nullopt;
  return profile.metrics.at_peak_reserved.cached_unused();
}

}  // namespace fragscope::usecases
