// Every third-party snapshot in ../shared/fixtures/real-world (PyTorch 2.0 to 2.10, single and
// multi-device, state-only, torch.compile, ...) opens, shows which release wrote it, and imports
// every one of its devices: events, timeline and segment map. Skips when the folder is absent
// (the files are third-party data and never copied into the repository).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "engine/snapshot/snapshot.h"
#include "engine/snapshot/timeline.h"
#include "storage/db/run_store.h"
#include "storage/db/snapshot_import.h"

namespace fragscope::storage {
namespace {

const std::filesystem::path kFolder =
    std::filesystem::path(FRAGSCOPE_SHARED_FIXTURES) / "real-world";

nlohmann::json manifest() {
  std::ifstream in(kFolder / "manifest.json");
  return nlohmann::json::parse(in);
}

// The manifest's version_guess in TorchVersionGuess::range() terms: 2.10 and 2.11 write the same
// format, and the bare list form says only "2.1 or later".
std::string expected_range(const std::string& manifest_guess) {
  if (manifest_guess == "2.10")
    return "2.10-2.11";
  if (manifest_guess.starts_with(">=2.1"))
    return "2.1-2.11";
  return manifest_guess;
}

TEST(RealWorld, EverySnapshotOpensImportsAndShowsItsSegments) {
  if (!std::filesystem::exists(kFolder / "manifest.json"))
    GTEST_SKIP() << kFolder << " is absent";
  std::map<std::string, std::pair<int, int>> per_class;  // version_guess -> (files, imported)
  for (const auto& entry : manifest()) {
    const std::string file = entry["stored_as"];
    const std::string guess = entry["version_guess"];
    SCOPED_TRACE(file);
    ++per_class[guess].first;
    snapshot::Snapshot snap;
    try {
      snap = snapshot::read_snapshot(kFolder / file);
    } catch (const std::exception& error) {
      ADD_FAILURE() << "does not open: " << error.what();
      continue;
    }
    EXPECT_EQ(snap.torch_version.range(), expected_range(guess)) << snap.torch_version.evidence;
    EXPECT_NO_THROW(snapshot::recorded_allocator_config(snap));
    const auto& features = entry["features"];
    EXPECT_EQ(snap.segments.size(), features["num_segments"].get<std::size_t>());
    EXPECT_EQ(snap.trace_entry_count(), [&] {
      std::size_t n = 0;
      for (const auto& count : features["trace_entries_per_device"])
        n += count.get<std::size_t>();
      return n;
    }());

    bool all_devices = true;
    for (std::size_t device = 0; device < std::max<std::size_t>(snap.device_count(), 1); ++device) {
      SCOPED_TRACE("device " + std::to_string(device));
      try {
        RunStore store(":memory:");
        ImportOptions options;
        options.name = file;
        options.source_file = file;
        options.device = device;
        const ImportResult result = import_snapshot(store, snap, options);
        const RunRecord run = store.run(result.run);
        const std::size_t entries =
            device < snap.device_traces.size() ? snap.device_traces[device].size() : 0;
        EXPECT_EQ(run.event_count, entries);
        if (entries > 0)
          EXPECT_FALSE(store.timeline(result.run, 200).empty());
        else
          EXPECT_FALSE(result.truncated) << "a state-only device is not a truncated trace";
        // The segment map at the end is the snapshot's final state on this device.
        std::size_t segments = 0;
        for (const auto& segment : snap.segments)
          segments += segment.device == static_cast<int>(device) ? 1 : 0;
        const SegmentStateAt at_end = store.segment_state(result.run, run.event_count);
        EXPECT_EQ(at_end.state.segments().size(), segments);
        EXPECT_EQ(run.summary["torch_version"]["range"], snap.torch_version.range());
      } catch (const std::exception& error) {
        all_devices = false;
        ADD_FAILURE() << "does not import: " << error.what();
      }
    }
    if (all_devices)
      ++per_class[guess].second;
  }
  for (const auto& [guess, counts] : per_class)
    std::cout << "[ real-world ] " << guess << ": " << counts.second << " of " << counts.first
              << " open and import\n";
}

}  // namespace
}  // namespace fragscope::storage
