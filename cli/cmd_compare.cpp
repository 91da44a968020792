// fragscope-cli compare: stored runs side by side — peaks, fragmentation, OOMs, retries,
// segments, device calls, step time — with per-phase differences where the runs align and
// warnings when they were made under different conditions.
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "engine/allocator/config.h"
#include "engine/analysis/compare.h"
#include "engine/analysis/trace_requests.h"
#include "engine/core/error.h"
#include "storage/db/data_location.h"
#include "storage/db/run_store.h"

namespace fragscope::cli {
namespace {

constexpr std::uint64_t kDefaultPhases = 10;
constexpr std::uint64_t kMaxPhases = 1000;

std::vector<storage::RunId> parse_run_ids(const std::string& list) {
  std::vector<storage::RunId> ids;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    long long value = -1;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || value <= 0)
      throw UsageError{"--runs expects run ids separated by commas, e.g. 3,7; got \"" + list +
                       "\""};
    ids.push_back(storage::RunId{value});
  }
  if (ids.size() < 2)
    throw UsageError{"--runs needs at least two run ids"};
  return ids;
}

// The rules that decide block sizes for a stored run: the recorded settings of an imported
// snapshot, else its PYTORCH_CUDA_ALLOC_CONF.
snapshot::LayoutRules rules_of(const storage::RunRecord& record) {
  if (auto it = record.summary.find("allocator_settings");
      it != record.summary.end() && it->is_object())
    return snapshot::LayoutRules::from_allocator_settings(*it);
  try {
    return analysis::layout_rules_of(alloc::AllocatorConfig::parse(record.alloc_config));
  } catch (const alloc::AllocatorConfigError& error) {
    throw InputError("run " + std::to_string(record.id.value) + ": its allocator config \"" +
                     record.alloc_config + "\" does not parse: " + error.what());
  }
}

analysis::RunProfile profile_of(storage::RunStore& store, storage::RunId id, std::size_t phases) {
  const storage::RunRecord record = store.run(id);
  analysis::RunProfile profile;
  profile.label = "#" + std::to_string(id.value) + " " + record.name;
  profile.alloc_conf = record.alloc_config;
  profile.capacity = record.capacity;
  const storage::Environment& env = record.environment;
  profile.environment = {{"torch", env.torch_version},
                         {"cuda", env.cuda_version},
                         {"driver", env.driver_version},
                         {"gpu", env.gpu_name},
                         {"gpu_memory", env.gpu_memory ? std::to_string(env.gpu_memory) : ""},
                         {"fragscope", env.fragscope_version}};
  if (const auto fingerprint = store.recorded_environment(id))
    profile.recorded_environment = analysis::parse_recorded_environment(
        *fingerprint, store.database().path() + ": run " + std::to_string(id.value));
  if (auto stats = record.summary.find("memory_stats");
      stats != record.summary.end() && stats->contains("num_alloc_retries"))
    profile.alloc_retries = (*stats)["num_alloc_retries"].get<std::int64_t>();
  if (auto time = record.summary.find("estimated_step_time_ratio");
      time != record.summary.end() && time->is_number())
    profile.estimated_step_time = time->get<double>();

  const auto events = store.events(id, 0, record.event_count);
  if (!analysis::measure_run(profile, events, snapshot::SegmentState{rules_of(record)}, phases)) {
    // The stored series are exact even where the layout is unknown.
    for (const auto& bucket : store.timeline(id, 1)) {
      analysis::MemorySample& peak = profile.metrics.peak;
      peak.allocated = std::max<Bytes>(peak.allocated, static_cast<Bytes>(bucket.max.allocated));
      peak.reserved = std::max<Bytes>(peak.reserved, static_cast<Bytes>(bucket.max.reserved));
      peak.active = std::max<Bytes>(peak.active, static_cast<Bytes>(bucket.max.active));
      peak.requested = std::max<Bytes>(peak.requested, static_cast<Bytes>(bucket.max.requested));
    }
  }
  return profile;
}

int run_compare(const std::vector<std::string>& argv) {
  const Args args(argv, {}, {"--db", "--runs", "--json", "--phases", "--save"});
  args.expect_positional(0, "no positional arguments");
  const auto runs = args.option("--runs");
  if (!runs)
    throw UsageError{"--runs A,B[,C...] is required"};
  const std::vector<storage::RunId> ids = parse_run_ids(*runs);
  const std::uint64_t phases = args.uint_option("--phases").value_or(kDefaultPhases);
  if (phases == 0 || phases > kMaxPhases)
    throw UsageError{"--phases must be between 1 and " + std::to_string(kMaxPhases)};
  const std::string path = args.option_or("--db", storage::default_database_path());
  const bool save = args.option("--save").has_value();
  auto store = storage::open_run_store(
      path, save ? storage::OpenMode::read_write : storage::OpenMode::read_only, true);

  std::vector<analysis::RunProfile> profiles;
  for (const storage::RunId id : ids)
    profiles.push_back(profile_of(*store, id, static_cast<std::size_t>(phases)));
  const analysis::Comparison comparison = analysis::compare_runs(profiles);
  nlohmann::json result = analysis::to_json(comparison);
  if (save) {
    const storage::ComparisonId saved = store->save_comparison(*args.option("--save"), ids, result);
    result["comparison_id"] = saved.value;
  }
  if (auto target = args.option("--json")) {
    write_json(result, *target);
    return 0;
  }
  std::cout << analysis::to_text(comparison);
  if (save)
    std::cout << "saved as comparison " << result["comparison_id"].get<std::int64_t>() << "\n";
  return 0;
}

}  // namespace

FRAGSCOPE_CLI_COMMAND({"compare",
                       "compare --db FILE --runs A,B[,C...] [--phases N] [--save NAME] "
                       "[--json FILE|-]",
                       "Stored runs side by side: peaks, fragmentation, OOMs, retries, segments, "
                       "device calls, step time; per-phase differences and condition warnings",
                       run_compare});

}  // namespace fragscope::cli
