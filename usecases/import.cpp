#include "usecases/import.h"

#include "engine/snapshot/recording_stats.h"

namespace fragscope::usecases {

Recording read_recording(const std::string& path, const std::string& stats_file,
                         const std::string& environment_file) {
  Recording recording;
  recording.path = path;
  recording.snapshot = snapshot::read_snapshot_spooled(path);
  if (!stats_file.empty()) {
    recording.stats = snapshot::read_recording_stats(stats_file);
    recording.stats_file = stats_file;
  } else if ((recording.stats = storage::read_companion_stats(path))) {
    recording.stats_file = storage::companion_stats_path(path);
  }
  if (!environment_file.empty()) {
    recording.environment = storage::read_recording_environment(environment_file);
    recording.environment_file = environment_file;
  } else if ((recording.environment = storage::read_companion_environment(path))) {
    recording.environment_file = storage::companion_environment_path(path);
  }
  return recording;
}

storage::ImportResult import_recording(storage::RunStore& store, const Recording& recording,
                                       storage::ImportOptions options, const WorkControl& control) {
  if (options.name.empty())
    options.name = storage::run_name_for(recording.path);
  if (options.source_file.empty())
    options.source_file = recording.path;
  options.recorded_stats = recording.stats;
  options.recorded_environment = recording.environment;
  options.recorded_environment_file = recording.environment_file;
  return storage::import_snapshot(store, recording.snapshot, options, control);
}

}  // namespace fragscope::usecases
