#include "cli/snapshot_options.h"

#include "engine/core/error.h"
#include "engine/snapshot/profile_choice.h"

namespace fragscope::cli {

void apply_torch_version_option(const Args& args, snapshot::Snapshot& snapshot) {
  const auto text = args.option("--torch-version");
  if (!text)
    return;
  const std::optional<TorchVersion> version = TorchVersion::parse(*text);
  if (!version || *version < kOldestTorch || *version > kLatestTorch)
    throw UsageError{"--torch-version '" + *text + "': expected a PyTorch release from " +
                     kOldestTorch.to_string() + " to " + kLatestTorch.to_string() +
                     " as X.Y (e.g. 2.5)"};
  snapshot::override_torch_version(snapshot, *version);
}

nlohmann::json torch_version_json(const snapshot::TorchVersionGuess& guess) {
  const alloc::ProfileChoice choice = snapshot::profile_choice(guess);
  return {{"range", guess.range()},
          {"source", std::string(alloc::to_string(choice.source))},
          {"allocator_rules", choice.describe()},
          {"oldest", guess.oldest.to_string()},
          {"newest", guess.newest.to_string()},
          {"profile", guess.profile().to_string()},
          {"evidence", guess.evidence},
          {"from_override", guess.from_override}};
}

alloc::RecordedAllocatorConfig recorded_config_or_error(const std::string& path,
                                                        const snapshot::Snapshot& snapshot) {
  try {
    return snapshot::recorded_allocator_config(snapshot);
  } catch (const alloc::AllocatorConfigError& error) {
    throw InputError(path + ": " + error.what());
  }
}

}  // namespace fragscope::cli
