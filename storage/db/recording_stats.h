#pragma once
// What a recorder writes beside its snapshot (NAME.stats.json: PyTorch's memory_stats(), the
// outcome, PYTORCH_CUDA_ALLOC_CONF, the device and the per-process cap), as the run stores it. The
// file is read at the edge (engine/snapshot/recording_stats.h, which also gives the cap its one
// name, allowed_bytes); here its fields go into the run. Pure JSON, no database, so the fuzzer
// can reach all of it.
#include <nlohmann/json.hpp>

#include "storage/db/run_store.h"

namespace fragscope::storage {

// The recorded torch / CUDA versions, device name and memory, where `stats` has them with the
// expected types; other fields of `environment` are left as they are.
void apply_recorded_environment(const nlohmann::json& stats, Environment& environment);
// summary["memory_stats"], ["recorded_outcome"], ["recorded_alloc_conf"], ["step_ends_us"] and
// ["allowed_bytes"] (the cap, which a replay needs to fail where the recording failed), from a
// document snapshot::read_recording_stats gave.
void add_recorded_stats(const nlohmann::json& stats, nlohmann::json& summary);

}  // namespace fragscope::storage
