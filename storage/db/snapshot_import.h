#pragma once
// Storing a PyTorch snapshot as a run, and rebuilding a snapshot from a stored run. Shared by
// `fragscope-cli import` / `export-snapshot` and the GUI's File > Open.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/cancel.h"
#include "engine/snapshot/snapshot.h"
#include "storage/db/recording_stats.h"
#include "storage/db/run_store.h"

namespace fragscope::storage {

struct ImportOptions {
  std::string name;                   // the run's name
  std::string source_file;            // recorded in the summary
  std::optional<std::size_t> device;  // default: the device with the most trace entries
  std::optional<ExperimentId> experiment;
  // A recording FragScope made itself (torch-run) is stored as RunSource::torch, with the
  // environment the runner reported; fragscope's version and revision are always this build's.
  RunSource source = RunSource::imported;
  std::optional<Environment> environment;
  // What the recorder wrote beside the snapshot (NAME.stats.json as snapshot::read_recording_stats
  // gives it: the real memory_stats(), outcome, PYTORCH_CUDA_ALLOC_CONF, device and per-process
  // cap under allowed_bytes). Stored in the same transaction: the environment when `environment`
  // is unset, summary["memory_stats"], ["recorded_outcome"], ["recorded_alloc_conf"] and
  // ["allowed_bytes"] (the cap, which a replay needs to fail where the recording failed).
  std::optional<nlohmann::json> recorded_stats;
  // fragscope-record's environment fingerprint (NAME.env.json) and the file it came from:
  // stored whole with the run in the same transaction, and the run's environment columns
  // (torch, CUDA, driver, GPU, host) taken from it unless `environment` is set. Checked before
  // anything is written: a bad fingerprint is an InputError naming the file and the place.
  std::optional<nlohmann::json> recorded_environment;
  std::string recorded_environment_file;
};

// Where the stats of a snapshot file lie: NAME.stats.json beside NAME.pickle[.gz] / .pkl[.gz].
std::string companion_stats_path(const std::string& snapshot_path);
// snapshot::read_recording_stats of the companion file; nullopt when there is none.
std::optional<nlohmann::json> read_companion_stats(const std::string& snapshot_path);
// A recording's environment fingerprint (NAME.env.json, or any file given for it), checked with
// analysis::parse_recorded_environment: an InputError naming the file and the place otherwise.
nlohmann::json read_recording_environment(const std::string& env_path);
// NAME.env.json beside NAME.pickle[.gz] / .pkl[.gz].
std::string companion_environment_path(const std::string& snapshot_path);
// read_recording_environment of the companion file; nullopt when there is none.
std::optional<nlohmann::json> read_companion_environment(const std::string& snapshot_path);
// The run name a snapshot file gives: its file name without .pickle[.gz] / .pkl[.gz].
std::string run_name_for(const std::string& snapshot_path);

struct ImportResult {
  RunId run{};
  std::uint64_t events = 0;
  std::size_t segments = 0;  // the snapshot's segments on the imported device
  // The trace did not start from an empty allocator (recording began late, or the ring buffer
  // overflowed): the state before its first event was reconstructed from the final segments.
  bool truncated = false;
  std::size_t ooms = 0;
  // The snapshot contradicts itself (overlapping segments, a free of a busy segment, blocks
  // outside their segment, an alloc twice at one address, a trace that does not end in the final
  // segments): the run is stored with the series the trace alone gives, and these say why.
  // Also in the run's summary["warnings"].
  std::vector<std::string> warnings;
  // The allocator-state keyframes are the chain built while the events were stored (the run's
  // stored inputs were the ones it was built from), not a chain built after the commit.
  bool keyframes_built_in_advance = false;
};

// The snapshot's segments on `device` as a SegmentMap (blocks by request size, as the trace).
SegmentMap segment_map_of(const snapshot::Snapshot& snapshot, std::size_t device);

// Stores one device of `snapshot` as an imported run, in one transaction: on any error nothing
// is written. An unknown device is an InputError. The series are PyTorch's exact counters
// (snapshot::build_timeline); summary["series"] records how they were obtained.
// `control` is polled at every stage ("layout", "stacks", "events", "ooms", "commit") and reported
// to; a cancel seen at any of them, up to the last poll right before the commit, rolls the run
// back and throws fragscope::Cancelled. Once committed, the import has happened.
ImportResult import_snapshot(RunStore& store, const snapshot::Snapshot& snapshot,
                             const ImportOptions& options, const WorkControl& control = {});

}  // namespace fragscope::storage
