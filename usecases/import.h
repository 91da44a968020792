#pragma once
// Importing one recorded snapshot, once for both front-ends (the GUI's File ▸ Open and drop,
// `fragscope-cli import`): the snapshot and what fragscope-record wrote beside it are read and
// checked before the database is touched, then stored as one run in one transaction.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/cancel.h"
#include "engine/snapshot/snapshot.h"
#include "storage/db/snapshot_import.h"

namespace fragscope::usecases {

struct Recording {
  std::string path;  // the snapshot file as given
  snapshot::Snapshot snapshot;
  std::optional<nlohmann::json> stats;        // NAME.stats.json: the real memory_stats(), cap, ...
  std::string stats_file;                     // where `stats` came from ("" when none)
  std::optional<nlohmann::json> environment;  // NAME.env.json: the environment fingerprint
  std::string environment_file;               // where `environment` came from ("" when none)
};

// Reads `path` and its companions: `stats_file` / `environment_file` when given, else
// NAME.stats.json / NAME.env.json beside the snapshot when present. Bad input is an InputError
// naming the file; nothing is written anywhere.
Recording read_recording(const std::string& path, const std::string& stats_file = {},
                         const std::string& environment_file = {});

// Stores `recording` as one run: `options` says the name, device, experiment and source; the
// recording's stats and environment go in with it. `control` reaches every stage of the store; a
// cancel (fragscope::Cancelled) leaves no run.
storage::ImportResult import_recording(storage::RunStore& store, const Recording& recording,
                                       storage::ImportOptions options,
                                       const WorkControl& control = {});

}  // namespace fragscope::usecases
