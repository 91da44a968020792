// fragscope-cli replay: runs a recorded PyTorch trace through the caching-allocator model, under
// the recorded config (and compares with the recording) or under another config / capacity.
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/snapshot_options.h"
#include "engine/allocator/config.h"
#include "engine/allocator/stats.h"
#include "engine/allocator/summary.h"
#include "engine/core/error.h"
#include "engine/replay/replay.h"
#include "engine/snapshot/profile_choice.h"
#include "engine/snapshot/snapshot.h"

namespace fragscope::cli {
namespace {

nlohmann::json event_json(const std::optional<TraceEvent>& event) {
  if (!event)
    return nullptr;
  return {{"action", std::string(to_string(event->action))},
          {"addr", event->addr},
          {"size", event->size},
          {"stream", event->stream.value}};
}

nlohmann::json seeded_json(const replay::SeededState& seeded) {
  return {{"segments", seeded.segments},
          {"live_blocks", seeded.live_blocks},
          {"pending_blocks", seeded.pending_blocks},
          {"free_blocks", seeded.free_blocks},
          {"reserved", seeded.reserved},
          {"allocated", seeded.allocated},
          {"inferred_sizes", seeded.inferred_sizes},
          {"guessed_sizes", seeded.guessed_sizes},
          {"description", replay::describe(seeded)}};
}

int run_replay(const std::vector<std::string>& argv) {
  const Args args(argv, {"--summary"},
                  {"--alloc-conf", "--capacity", "--device", "--json", "--torch-version"});
  args.expect_positional(1, "one SNAPSHOT file");
  const std::filesystem::path file = args.positional()[0];

  replay::ReplayOptions options;
  // Capacity is what the allocator may reserve, as set_per_process_memory_fraction gives it
  // (e.g. gpt_oom_cap's cap_gib x 2^30): the snapshot does not record it. The device itself stays
  // as large as the recording's, so OOM texts carry the "allowed" clause PyTorch prints.
  if (auto capacity = args.uint_option("--capacity")) {
    if (*capacity == 0)
      throw UsageError{"--capacity must be at least 1 byte"};
    options.allowed_memory = *capacity;
  }
  const std::size_t device = static_cast<std::size_t>(args.uint_option("--device").value_or(0));

  snapshot::Snapshot snapshot = snapshot::read_snapshot_spooled(file);
  apply_torch_version_option(args, snapshot);
  const alloc::AllocatorProfile profile =
      alloc::allocator_profile(snapshot.torch_version.profile());
  if (auto conf = args.option("--alloc-conf")) {
    // As the snapshot's release parsed it (its options, messages and roundup rule).
    try {
      options.config = alloc::parse_alloc_conf(*conf, profile);
    } catch (const alloc::AllocatorConfigError& error) {
      throw InputError("--alloc-conf '" + *conf + "' (PyTorch " + profile.version.to_string() +
                       "): " + error.what());
    }
  }
  if (device >= std::max<std::size_t>(snapshot.device_count(), 1))
    throw InputError(file.string() + ": no device " + std::to_string(device) +
                     " in the snapshot (it has " + std::to_string(snapshot.device_count()) + ")");
  const alloc::RecordedAllocatorConfig recorded_config =
      recorded_config_or_error(file.string(), snapshot);
  replay::ReplayResult result;
  try {
    result = replay::replay_snapshot(snapshot, options, device);
  } catch (const InputError& error) {
    throw InputError(file.string() + ": " + error.what());
  }

  nlohmann::json segment_events = nlohmann::json::array();
  for (const auto& [action, size] : result.segment_events)
    segment_events.push_back({std::string(to_string(action)), size});
  nlohmann::json ooms = nlohmann::json::array();
  for (const alloc::RequestOom& oom : result.run.ooms)
    ooms.push_back({{"allocs_before", oom.allocs_before},
                    {"size", oom.oom.rounded_size},
                    {"message", oom.oom.message}});
  const std::string summary = alloc::memory_summary(result.run.stats, 0, false);

  nlohmann::json recorded = nullptr;
  if (result.compared) {
    nlohmann::json divergence = nullptr;
    if (result.first_divergence) {
      const replay::Divergence& d = *result.first_divergence;
      divergence = {{"event_index", d.event_index},
                    {"trace_entry", d.trace_entry},
                    {"expected", event_json(d.expected)},
                    {"got", event_json(d.got)},
                    {"description", replay::describe(d)}};
    }
    recorded = {{"segment_events_match", result.segment_events_match},
                {"ooms_match", result.ooms_match},
                {"first_divergence", divergence}};
  }

  if (auto target = args.option("--json")) {
    nlohmann::json stats = nlohmann::json::object();
    for (const auto& [key, value] : alloc::to_memory_stats(result.run.stats))
      stats[key] = value;
    const nlohmann::json out = {
        {"entries", result.entries},
        {"allocs", result.allocs},
        {"segment_events", segment_events},
        {"ooms", ooms},
        {"memory_stats", stats},
        {"memory_summary", summary},
        {"recorded", recorded},
        {"seeded", seeded_json(result.seeded)},
        {"warnings", result.warnings},
        {"device", device},
        {"torch_version", torch_version_json(snapshot.torch_version)},
        {"allocator_profile", result.profile.version.to_string()},
        {"allocator_config_note", options.config ? std::string() : recorded_config.note()}};
    write_json(out, *target);
    if (*target != "-" && !args.flag("--summary"))
      std::cout << "wrote " << *target << "\n";
  } else {
    std::cout << "replayed " << file.string() << " (device " << device << "): " << result.entries
              << " trace entries, " << result.allocs << " allocation requests, "
              << segment_events.size() << " segment events, " << ooms.size() << " OOM(s)\n"
              << "  snapshot written by PyTorch " << snapshot.torch_version.describe() << "\n"
              << "  allocator rules: "
              << snapshot::profile_choice(snapshot.torch_version).describe() << "\n";
    if (!options.config && !recorded_config.note().empty())
      std::cout << "  allocator settings: " << recorded_config.note() << "\n";
    if (!result.seeded.empty())
      std::cout << replay::describe(result.seeded) << "\n";
    for (const std::string& warning : result.warnings)
      std::cerr << "warning: " << warning << "\n";
    if (result.compared) {
      std::cout << "recorded config: segment events "
                << (result.segment_events_match ? "match" : "differ") << ", OOMs "
                << (result.ooms_match ? "match" : "differ") << "\n";
      if (result.first_divergence)
        std::cout << "first divergence: " << replay::describe(*result.first_divergence) << "\n";
    }
  }
  if (args.flag("--summary"))
    std::cout << summary;
  return 0;
}

}  // namespace

FRAGSCOPE_CLI_COMMAND({"replay",
                       "replay SNAPSHOT [--alloc-conf STRING] [--capacity BYTES] [--device N] "
                       "[--torch-version X.Y] [--json FILE|-] [--summary]",
                       "Replay a PyTorch trace through the caching-allocator model (what-if with "
                       "another config or capacity)",
                       run_replay});

}  // namespace fragscope::cli
