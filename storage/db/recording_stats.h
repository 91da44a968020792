#pragma once
// What a recording script writes beside its snapshot (NAME.stats.json: PyTorch's memory_stats(),
// the outcome, PYTORCH_CUDA_ALLOC_CONF, the device and the per-process cap), read defensively:
// it is a user's file like any other. Pure JSON, no database, so the fuzzer can reach all of it.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "storage/db/run_store.h"

namespace fragscope::storage {

// `text` as a stats document: bounded nesting and size (engine/core/input_file.h), and a JSON
// object, else an InputError naming `source` and the place.
nlohmann::json parse_recording_stats(std::string_view text, const std::string& source);
// The same for a file (NAME.stats.json, or any file given for it); a FIFO or other non-regular
// file is refused without being opened.
nlohmann::json read_recording_stats(const std::string& stats_path);

// The recorded torch / CUDA versions, device name and memory, where `stats` has them with the
// expected types; other fields of `environment` are left as they are.
void apply_recorded_environment(const nlohmann::json& stats, Environment& environment);
// summary["memory_stats"], ["recorded_outcome"], ["recorded_alloc_conf"] and ["allowed_bytes"]
// (the cap, which a replay needs to fail where the recording failed).
void add_recorded_stats(const nlohmann::json& stats, nlohmann::json& summary);

}  // namespace fragscope::storage
