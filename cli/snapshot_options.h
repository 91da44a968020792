#pragma once
// What every command that reads a snapshot shares: --torch-version and how the version guess
// and the recorded allocator config are shown.
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "engine/allocator/config.h"
#include "engine/snapshot/snapshot.h"

namespace fragscope::cli {

// --torch-version X.Y replaces the guess from the file's format; a release outside 2.0..2.11 (or
// not X.Y) is a UsageError.
void apply_torch_version_option(const Args& args, snapshot::Snapshot& snapshot);

nlohmann::json torch_version_json(const snapshot::TorchVersionGuess& guess);

// recorded_allocator_config, with a mistyped value reported as an InputError naming the file.
alloc::RecordedAllocatorConfig recorded_config_or_error(const std::string& path,
                                                        const snapshot::Snapshot& snapshot);

}  // namespace fragscope::cli
