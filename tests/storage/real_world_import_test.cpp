// Every third-party snapshot in ../shared/fixtures/real-world (PyTorch 2.0 to 2.10, single and
// multi-device, state-only, torch.compile, ...) opens, shows which release wrote it, and imports
// every one of its devices: events, timeline, segment map and memory_stats() at the end. Skips
// when the folder is absent (the files are third-party data and never copied into the repository).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "engine/allocator/stats.h"
#include "engine/replay/replay.h"
#include "engine/snapshot/snapshot.h"
#include "engine/snapshot/timeline.h"
#include "storage/db/run_store.h"
#include "storage/db/snapshot_import.h"
#include "storage/db/stats_at.h"

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

// The runs whose stored summary (memory_stats_at, what the Summary page and `fragscope-cli
// summary` show) cannot equal the snapshot-level replay yet, with the reason. Each is a bug to
// fix, not a tolerance.
const std::map<std::string, std::string>& summary_not_yet_equal() {
  // The stored start state keeps request sizes only; load_run_trace gives a block live at the
  // start the split rule's size inside its gap, where snapshot::initial_state also reads the next
  // allocation inside the gap (replay's inferred sizes): these four differ by those blocks.
  static const std::string kSplitRuleSizes =
      "stored start state: block sizes from the split rule alone, not the next allocation in the "
      "gap";
  static const std::map<std::string, std::string> files = {
      {"Hyperion-shuo__assignment2-systems__results_torch_memory_profiles_memory_snapshot_large_"
       "cl128_fw_with_grad_bf16.pickle.gz",
       kSplitRuleSizes},
      {"Hyperion-shuo__assignment2-systems__results_torch_memory_profiles_memory_snapshot_large_"
       "cl256_fw_with_grad_bf16.pickle.gz",
       kSplitRuleSizes},
      {"Hyperion-shuo__assignment2-systems__results_torch_memory_profiles_memory_snapshot_large_"
       "cl512_fw_with_grad_bf16.pickle.gz",
       kSplitRuleSizes},
      {"Wedsonlin__assignment2-systems__results_medium_512_training_memory_snapshot.pickle.gz",
       kSplitRuleSizes},
  };
  return files;
}

// The .current values of memory_stats() at the end of a traced device where they differ: the stored
// run's replay (seeded with the state stored at its first event, what the Summary page and
// `fragscope-cli summary` show) against the snapshot's own replay (seeded with
// snapshot::initial_state). Both start mid-run traces from the state at their first entry, so they
// agree.
std::string stored_summary_differs(RunStore& store, RunId run, const snapshot::Snapshot& snap,
                                   std::size_t device) {
  const MemoryStatsAt stored = memory_stats_at(store, run, store.run(run).event_count);
  const replay::ReplayResult replayed = replay::replay_snapshot(snap, {}, device);
  // Every .current key of memory_stats(), through the table that names them.
  const std::map<std::string, std::int64_t> a = alloc::to_memory_stats(stored.stats);
  const std::map<std::string, std::int64_t> b = alloc::to_memory_stats(replayed.run.stats);
  std::string differs;
  for (const auto& [key, value] : a)
    if (key.ends_with(".current") && value != b.at(key))
      differs += std::string(differs.empty() ? "" : ", ") + key + " " + std::to_string(value) +
                 " vs " + std::to_string(b.at(key));
  if (stored.profile.version != replayed.profile.version)
    differs += std::string(differs.empty() ? "" : ", ") + "allocator rules of " +
               stored.profile.version.to_string() + " vs " + replayed.profile.version.to_string();
  return differs;
}

TEST(RealWorld, EverySnapshotOpensImportsAndShowsItsSegmentsAndSummary) {
  if (!std::filesystem::exists(kFolder / "manifest.json"))
    GTEST_SKIP() << kFolder << " is absent";
  std::map<std::string, std::pair<int, int>> per_class;  // version_guess -> (files, imported)
  // version_guess -> (traced devices, whose stored summary equals the replay)
  std::map<std::string, std::pair<int, int>> summaries;
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
        if (entries == 0)
          continue;
        // memory_stats() at the end as the Summary page shows it equals the snapshot's replay
        // (in this test rather than its own so that CI's sanitized stage imports each file once).
        const std::string differs = stored_summary_differs(store, result.run, snap, device);
        const auto listed = summary_not_yet_equal().find(file);
        if (listed == summary_not_yet_equal().end())
          EXPECT_TRUE(differs.empty()) << "stored summary vs replay: " << differs;
        else if (differs.empty())
          ADD_FAILURE() << "now equal, remove it from the list (" << listed->second << ")";
        ++summaries[guess].first;
        summaries[guess].second += differs.empty() ? 1 : 0;
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
  for (const auto& [guess, counts] : summaries)
    std::cout << "[ real-world ] " << guess << ": stored summary equals the replay on "
              << counts.second << " of " << counts.first << " traced devices\n";
}

}  // namespace
}  // namespace fragscope::storage
