// fragscope-cli info: what a PyTorch memory snapshot holds, without opening the GUI.
#include <array>
#include <iostream>
#include <span>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/snapshot_options.h"
#include "engine/core/error.h"
#include "engine/snapshot/profile_choice.h"
#include "engine/snapshot/snapshot.h"
#include "engine/snapshot/timeline.h"

namespace fragscope::cli {
namespace {

nlohmann::json device_info(const snapshot::Snapshot& snap, int device) {
  // The trace is walked where it lies (packed when read spooled), never copied out.
  const snapshot::TraceBlocks trace = snap.trace_blocks(static_cast<std::size_t>(device));
  std::array<std::uint64_t, kTraceActionCount> counts{};
  nlohmann::json ooms = nlohmann::json::array();
  std::int64_t first_time_us = 0, last_time_us = 0;
  // Counted from the entries the timeline hands out as it replays them (its samples are not kept:
  // only the peaks and the end are needed; a 1.2M-entry trace's would be 70 MB): one walk of the
  // trace instead of a walk of its own before the timeline's.
  snapshot::TimelineSinks sinks;
  sinks.on_samples = [&](std::span<const TraceEvent> events, std::span<const MemorySample>,
                         std::size_t first) {
    for (std::size_t k = 0; k < events.size(); ++k) {
      const TraceEvent& event = events[k];
      ++counts[static_cast<std::size_t>(event.action)];
      if (event.action == TraceAction::oom)
        ooms.push_back(
            {{"entry", first + k}, {"requested", event.size}, {"device_free", event.addr}});
      if (first + k == 0)
        first_time_us = event.time_us;
      last_time_us = event.time_us;
    }
  };
  // Counted again if the timeline begins again (a start it took to be empty was not).
  sinks.on_restart = [&] {
    counts = {};
    ooms = nlohmann::json::array();
    first_time_us = last_time_us = 0;
  };
  const snapshot::Timeline tl = snapshot::build_timeline(snap, device, sinks);
  nlohmann::json actions = nlohmann::json::object();
  for (int a = 0; a < kTraceActionCount; ++a)
    actions[std::string(to_string(static_cast<TraceAction>(a)))] =
        counts[static_cast<std::size_t>(a)];
  std::uint64_t segments = 0, reserved = 0, blocks = 0;
  for (const auto& s : snap.segments) {
    if (s.device != device)
      continue;
    ++segments;
    reserved += s.total_size;
    blocks += s.blocks.size();
  }
  // A device without entries has only its final state: nothing was cut off, nothing to replay.
  const bool state_only = trace.size() == 0;
  nlohmann::json out = {
      {"device", device},
      {"entries", trace.size()},
      {"actions", actions},
      {"segments", segments},
      {"blocks", blocks},
      {"reserved_bytes", reserved},
      {"truncated", !state_only && tl.truncated},
      {"state_only", state_only},
      {"predating_blocks", tl.predating_blocks},
      {"replay_matches_segments", tl.matches_final_segments},
      {"peak_allocated", tl.peak.allocated},
      {"peak_reserved", tl.peak.reserved},
      {"peak_active", tl.peak.active},
      {"peak_requested", tl.peak.requested},
      {"peak_inactive_split", tl.peak.inactive_split},
      {"ooms", ooms},
  };
  if (!tl.matches_final_segments && !state_only)
    out["replay_mismatch"] = tl.mismatch;
  if (!state_only && first_time_us != 0) {
    out["first_time_us"] = first_time_us;
    out["last_time_us"] = last_time_us;
    // In double: the difference of two hostile times (±2^63) overflows 64-bit integers.
    out["duration_s"] =
        (static_cast<double>(last_time_us) - static_cast<double>(first_time_us)) / 1e6;
  }
  return out;
}

int run_info(const std::vector<std::string>& argv) {
  const Args args(argv, {}, {"--json", "--device", "--torch-version"});
  args.expect_positional(1, "SNAPSHOT");
  const std::string& path = args.positional()[0];
  // Spooled: the entries packed (~11 bytes each instead of 48), as an import reads them; info
  // shows no entry texts.
  snapshot::Snapshot snap = snapshot::read_snapshot_spooled(path);
  apply_torch_version_option(args, snap);
  const std::optional<std::uint64_t> only_device = args.uint_option("--device");
  if (only_device && *only_device >= snap.device_count())
    throw InputError(path + ": no device " + std::to_string(*only_device) +
                     " in the snapshot (it has " + std::to_string(snap.device_count()) + ")");
  nlohmann::json devices = nlohmann::json::array();
  for (std::size_t d = 0; d < snap.device_count(); ++d) {
    if (only_device && *only_device != d)
      continue;
    try {
      devices.push_back(device_info(snap, static_cast<int>(d)));
    } catch (const InputError& e) {
      // The timeline's errors name the trace entry, not the file: add it, once.
      const std::string what = e.what();
      if (what.rfind(path, 0) == 0)
        throw;
      throw InputError(path + ": device " + std::to_string(d) + ": " + what);
    }
  }
  const alloc::RecordedAllocatorConfig config = recorded_config_or_error(path, snap);
  nlohmann::json info = {
      {"file", path},
      {"format", snap.format == snapshot::SnapshotFormat::v2_0 ? "2.0" : "2.1+"},
      {"pickle_protocol", snap.pickle_protocol},
      {"entries", snap.trace_entry_count()},
      {"torch_version", torch_version_json(snap.torch_version)},
      {"allocator_settings", snap.allocator_settings},
      {"allocator_settings_recorded", snap.allocator_settings_recorded},
      {"allocator_config_note", config.note()},
      {"external_annotations", snap.external_annotations.size()},
      {"device_count", snap.device_count()},
      {"warnings", snap.warnings},
      {"frames", snap.frames.frame_count()},
      {"stacks", snap.frames.stack_count() - 1},
      {"devices", devices},
  };
  if (auto target = args.option("--json")) {
    write_json(info, *target);
    return 0;
  }
  std::cout << path << ": PyTorch " << info["format"].get<std::string>()
            << " snapshot, pickle protocol " << snap.pickle_protocol << ", " << snap.device_count()
            << " device(s), " << snap.trace_entry_count() << " trace entries\n";
  std::cout << "  written by PyTorch " << snap.torch_version.describe() << "\n";
  std::cout << "  replays under " << snapshot::profile_choice(snap.torch_version).describe()
            << "\n";
  if (snap.allocator_settings_recorded)
    std::cout << "  allocator settings: PYTORCH_CUDA_ALLOC_CONF='" << config.config.raw << "'\n";
  if (!config.note().empty())
    std::cout << "  allocator settings: " << config.note() << "\n";
  for (const std::string& warning : snap.warnings)
    std::cout << "  note: " << warning << "\n";
  for (const auto& d : devices) {
    std::cout << "device " << d["device"].get<int>() << ": " << d["entries"].get<std::uint64_t>()
              << " entries" << (d["state_only"].get<bool>() ? " (state only: no trace)" : "");
    if (d.contains("duration_s"))
      std::cout << " over " << d["duration_s"].get<double>() << " s";
    std::cout << (d["truncated"].get<bool>() ? " (TRUNCATED: the trace starts mid-run)" : "")
              << "\n  actions:";
    for (const auto& [name, count] : d["actions"].items())
      if (count.get<std::uint64_t>() > 0)
        std::cout << " " << name << "=" << count.get<std::uint64_t>();
    std::cout << "\n  final state: " << d["segments"].get<std::uint64_t>() << " segments, "
              << d["blocks"].get<std::uint64_t>() << " blocks, "
              << d["reserved_bytes"].get<std::uint64_t>() << " B reserved\n"
              << "  peaks: allocated " << d["peak_allocated"].get<std::uint64_t>()
              << " B, reserved " << d["peak_reserved"].get<std::uint64_t>() << " B, active "
              << d["peak_active"].get<std::uint64_t>() << " B, requested "
              << d["peak_requested"].get<std::uint64_t>() << " B\n";
    for (const auto& oom : d["ooms"])
      std::cout << "  OOM at entry " << oom["entry"].get<std::uint64_t>() << ": requested "
                << oom["requested"].get<std::uint64_t>() << " B with "
                << oom["device_free"].get<std::uint64_t>() << " B free on the device\n";
    if (d.contains("replay_mismatch"))
      std::cout << "  warning: replaying the trace does not reproduce the final segments: "
                << d["replay_mismatch"].get<std::string>() << "\n";
  }
  return 0;
}

}  // namespace

FRAGSCOPE_CLI_COMMAND({"info", "info SNAPSHOT [--device N] [--torch-version X.Y] [--json FILE|-]",
                       "summarise a PyTorch memory snapshot (.pickle or .pickle.gz)", run_info});

}  // namespace fragscope::cli
